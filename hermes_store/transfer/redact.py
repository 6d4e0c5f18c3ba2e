"""Secret redaction for exports (docs/formats.md#redaction).

Stdlib only and database-free, so every exporter (jsonl, md, html, trace, manifests, file names)
can run the same scrubber over bodies *and* session metadata; docs/lessons.md#transfer records a
``--redact`` that cleaned bodies but leaked titles, cwd and system prompts.

Policy:

* A secret under 18 characters becomes ``***``; a longer one keeps its first 6 and last 4
  characters around ``***`` so a reader can still tell which key it was.
* Only values are masked, never the name that labels them (``API_KEY=***``).
* Text that merely *names* a secret (``os.getenv("API_KEY")``, ``$TOKEN``, ``<your-key>``,
  ``tokenizer:``, file paths) is left alone.
* Counts per category are kept in :attr:`Redactor.counts`; the values never are.
* Redacting already-redacted text changes nothing and counts nothing: every pass skips values
  that already carry the mask marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "MASK",
    "METADATA_FIELDS",
    "Redactor",
    "mask_secret",
    "redact_session_metadata",
    "redact_text",
    "redact_value",
]

MASK = "***"
_FULL_MASK_BELOW = 18

#: Session columns that carry free text a secret can hide in (docs/formats.md#redaction).
METADATA_FIELDS: tuple[str, ...] = (
    "title", "cwd", "git_repo_root", "git_branch", "system_prompt",
    "model_config", "origin_json", "display_name",
)

# Message columns that are structural, never free text; everything else in a message is scanned.
_MESSAGE_STRUCTURAL = frozenset(
    {"id", "session_id", "role", "timestamp", "token_count", "active", "compacted", "finish_reason"}
)


def mask_secret(secret: str) -> str:
    """Mask one secret value according to the length rule of docs/formats.md#redaction."""
    if len(secret) < _FULL_MASK_BELOW:
        return MASK
    return f"{secret[:6]}{MASK}{secret[-4:]}"


# --------------------------------------------------------------------------- secret names

# A name part is a keyword, optionally glued to a common qualifier (APIKEY, AUTHTOKEN, DBPASS).
_NAME_PART = re.compile(
    r"^(?:API|ACCESS|SECRET|PRIVATE|AUTH|REFRESH|BEARER|SESSION|CLIENT|MASTER|ADMIN|ROOT|DB|BOT)?"
    r"(?P<kw>KEY|TOKEN|AUTH|PASSWORD|PASSWD|PASS|PWD|PASSPHRASE|SECRET|CREDENTIAL)S?$",
    re.IGNORECASE,
)
# Strong keywords label a secret wherever they sit in the name (SECRET_KEY_BASE, PASSWORD_HASH).
_ANYWHERE = frozenset({"PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "CREDENTIAL"})
_STRONG = _ANYWHERE | {"PASS", "PWD"}
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def secret_name_strength(name: str) -> str | None:
    """Return ``"strong"``/``"weak"`` when *name* labels a secret, else ``None``.

    Keywords must be whole name parts (split on ``_ - .`` and camelCase) so that
    ``tokenizer`` or ``Secretary`` do not match; KEY/TOKEN/AUTH must be the last part so
    that ``token_count`` or ``auth_mode`` do not either.
    """
    parts = [
        word
        for piece in re.split(r"[_\-.\s]+", name)
        if piece
        for word in (_WORDS.findall(piece) or [piece])
        if not word.isdigit()  # API_KEY_2 is still a key
    ]
    result: str | None = None
    for i, part in enumerate(parts):
        m = _NAME_PART.match(part)
        if not m:
            continue
        kw = m.group("kw").upper()
        if kw in _ANYWHERE or i == len(parts) - 1:
            if kw in _STRONG:
                return "strong"
            result = "weak"
    return result


_SKIP_LITERALS = frozenset(
    {"none", "null", "nil", "true", "false", "str", "string", "bytes", "int", "bool", "any",
     "optional", "undefined", "lambda", "required", "self", "os", "env", "yes", "no"}
)
_REFERENCE = re.compile(
    r"""^(?:\$|<|\{\{|%\(|\[\[)            # $VAR, ${VAR}, <your-key>, {{ tmpl }}, %(x)s
       |^[A-Za-z_][\w.]*[(\[]                # os.getenv("X"), get_key(), tokens[0]
       |^(?:~|\.{1,2})?/[\w.\-/]*$           # file paths
       |^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$    # attribute references: self.token, cfg.api_key
       |^(?:Optional|List|Dict|Union|Literal)\[
    """,
    re.X,
)


def _names_only(value: str, strength: str) -> bool:
    """True when *value* is a reference or placeholder rather than a secret."""
    v = value.strip()
    if not v or MASK in v or v.lower() in _SKIP_LITERALS or _REFERENCE.search(v):
        return True
    if strength != "weak":
        return False
    # KEY/TOKEN also label sort keys, counters and variable names: demand something random.
    return (len(v) < 8 or v.isdigit() or re.fullmatch(r"[a-z_]+", v) is not None
            or re.search(r"\s", v) is not None)


# --------------------------------------------------------------------------- patterns

_VENDOR = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-[A-Za-z0-9_\-]{20,}"                      # OpenAI, Anthropic sk-ant-, Langfuse sk-lf-
    r"|pk-lf-[A-Za-z0-9\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|xapp-[A-Za-z0-9\-]{10,}"
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}|whsec_[0-9A-Za-z]{20,}"
    r"|SG\.[\w\-]{16,}\.[\w\-]{16,}"
    r"|hf_[A-Za-z0-9]{30,}|r8_[A-Za-z0-9]{30,}|npm_[A-Za-z0-9]{30,}"
    r"|pypi-[A-Za-z0-9_\-]{40,}|dop_v1_[a-f0-9]{40,}"
    r"|gsk_[A-Za-z0-9]{30,}|xai-[A-Za-z0-9]{30,}|tvly-[A-Za-z0-9\-]{20,}"
    r"|exa_[A-Za-z0-9]{20,}|pplx-[A-Za-z0-9]{30,}|fal_[A-Za-z0-9]{20,}"
    r"|fc-[A-Za-z0-9]{20,}|ntn_[A-Za-z0-9]{30,}|fw_[A-Za-z0-9]{20,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}|ya29\.[0-9A-Za-z_\-]{20,}|lin_api_[A-Za-z0-9]{30,}"
    r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{20,}|sntrys_[A-Za-z0-9_=]{30,}"
    r"|gAAAAA[A-Za-z0-9_\-]{40,}={0,2}"            # Fernet tokens
    r")"
)
_PEM = re.compile(
    r"(?P<head>-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----)"
    r"(?P<body>[\s\S]*?)"
    r"(?P<tail>-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)
_JWT = re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*")
_TELEGRAM = re.compile(r"(?<![\w:])\d{6,12}:AA[A-Za-z0-9_\-]{30,}")
_PHONE = re.compile(r"(?<![\w+])\+[1-9]\d{7,14}(?![\d])")
# scheme://user:password@host — any scheme, so postgres, mysql, mongodb+srv, redis, amqp, https…
_URL_PASSWORD = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s:/@'\"]*:(?P<secret>[^\s/?#@'\"]+)@")
_URL_USERINFO = re.compile(r"(?i)\bhttps?://(?P<secret>[^\s:/@'\"]+)@")
_QUERY = re.compile(
    r"(?i)(?<=[?&;])(?:access_token|refresh_token|id_token|token|api_key|apikey|key|code"
    r"|signature|sig|password|client_secret|x-amz-signature|x-amz-security-token)"
    r"=(?P<secret>[^&\s#'\"\\<>]+)"
)
_AUTH_HEADER = re.compile(
    r"(?i)(?<![\w-])(?:proxy-)?authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?[ \t]*"
    r"(?:(?:bearer|basic|token|digest|bot|apikey|sso-key)[ \t]+)?(?P<secret>[^\s\"'\\,;]+)"
)
_BEARER = re.compile(r"(?i)(?<![\w-])bearer[ \t]+(?P<secret>[A-Za-z0-9._~+/\-]{12,}=*)")
_COOKIE = re.compile(
    r"(?i)(?<![\w-])(?:set-)?cookie\\?[\"']?[ \t]*:[ \t]*\\?[\"']?"
    r"(?P<secret>[^\r\n\"'\\]*=[^\r\n\"'\\]*)"
)
_COOKIE_ATTRS = frozenset({"path", "domain", "expires", "max-age", "samesite"})
# NAME: value / NAME = value lines (YAML, TOML, INI, .env): the value runs to the end of the line.
_LINE_ASSIGN = re.compile(
    r"(?im)^(?P<lead>[ \t]*(?:-[ \t]+)?(?:export[ \t]+)?)(?P<name>[A-Za-z_][\w.\-]{0,80})"
    r"[ \t]*[:=][ \t]*(?P<secret>[^\s\"'#][^\n#]*?)[ \t]*(?=[ \t]#|\r?$)"
)
# Inline NAME=value, "name": "value", \"name\":\"value\", 'name': 'value', --name=value.
_ASSIGN = re.compile(
    r"""(?<![\w.])(?P<nq>\\?["']?)(?P<name>[A-Za-z_][\w.\-]{0,80})(?P=nq)[ \t]*(?::=|[:=])[ \t]*
    (?:\\"(?P<esc>(?:(?!\\").)*)\\"
      |"(?P<dq>(?:[^"\\\n]|\\.)*)"
      |'(?P<sq>(?:[^'\\\n]|\\.)*)'
      |(?P<bare>[^\s"'`,;)\]{}<>&]+))""",
    re.X,
)


def _vendor_plausible(token: str) -> bool:
    """Random keys contain digits or mixed case; slugs like ``fc-day-grid-header`` do not."""
    if token.startswith(("AKIA", "ASIA")):
        return True
    body = token.split("_", 1)[-1] if "_" in token[:12] else token.split("-", 1)[-1]
    has_digit = any(c.isdigit() for c in body)
    return has_digit or (any(c.isupper() for c in body) and any(c.islower() for c in body))


# --------------------------------------------------------------------------- redactor

class Redactor:
    """Stateful scrubber: same rules everywhere, per-category counts for the stderr note.

    Redaction is a pure function of the input; only :attr:`counts` accumulates.
    """

    def __init__(self, known_secrets: Iterable[str] = ()) -> None:
        self.counts: dict[str, int] = {}
        known = sorted({s for s in known_secrets if s and len(s) >= 4}, key=len, reverse=True)
        self._known = re.compile("|".join(map(re.escape, known))) if known else None

    # ---------------------------------------------------------------- public API
    def redact_text(self, text: str) -> str:
        """Redact every secret in a free-text string."""
        if not text:
            return text
        if self._known is not None:
            text = self._sub_whole(self._known, text, "known_secret")
        text = _PEM.sub(self._pem, text)
        text = self._sub_group(_URL_PASSWORD, text, "url_password")
        text = self._sub_group(_URL_USERINFO, text, "url_userinfo", self._userinfo_ok)
        text = self._sub_group(_QUERY, text, "query_param")
        text = self._sub_group(_AUTH_HEADER, text, "auth_header", self._not_reference)
        text = self._sub_group(_BEARER, text, "auth_header", self._not_reference)
        text = _COOKIE.sub(self._cookie, text)
        text = self._sub_whole(_JWT, text, "jwt")
        text = self._sub_whole(_TELEGRAM, text, "telegram_token")
        text = self._sub_whole(_VENDOR, text, "vendor_key", _vendor_plausible)
        text = _LINE_ASSIGN.sub(self._line_assign, text)
        text = _ASSIGN.sub(self._assign, text)
        text = self._sub_whole(_PHONE, text, "phone")
        return text

    def redact_value(self, obj: Any, _key: str | None = None) -> Any:
        """Redact recursively through dicts, lists/tuples and JSON held inside strings."""
        if isinstance(obj, str):
            return self._redact_str_value(obj, _key)
        if isinstance(obj, Mapping):
            return {k: self._redact_item(k, v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.redact_value(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_value(v) for v in obj)
        return obj

    def redact_session_metadata(self, session: Mapping[str, Any]) -> dict[str, Any]:
        """Copy of *session* with every free-text metadata column redacted."""
        out = dict(session)
        for field in METADATA_FIELDS:
            if out.get(field) is not None:
                out[field] = self.redact_value(out[field])
        return out

    def redact_message(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Copy of a message row with content, tool calls, results and reasoning redacted."""
        return {
            k: v if k in _MESSAGE_STRUCTURAL or v is None else self.redact_value(v)
            for k, v in message.items()
        }

    # ---------------------------------------------------------------- helpers
    def _count(self, category: str, n: int = 1) -> None:
        self.counts[category] = self.counts.get(category, 0) + n

    def _redact_item(self, key: Any, value: Any) -> Any:
        if not isinstance(key, str):
            return self.redact_value(value)
        lowered = key.lower()
        if isinstance(value, str):
            if lowered in ("authorization", "proxy-authorization"):
                return self._mask_header_value(value)
            if lowered in ("cookie", "set-cookie"):
                return self._mask_cookie_pairs(value)
        strength = secret_name_strength(key)
        if strength and isinstance(value, str) and not _names_only(value, strength):
            self._count("field")
            return mask_secret(value)
        if strength == "strong" and isinstance(value, (int, float)) and not isinstance(value, bool):
            self._count("field")
            return MASK
        return self.redact_value(value, key)

    def _mask_header_value(self, value: str) -> str:
        scheme, sep, cred = value.strip().partition(" ")
        secret = cred.strip() if sep else scheme
        if not secret or self._is_reference(secret):
            return value
        self._count("auth_header")
        return f"{scheme} {mask_secret(secret)}" if sep else mask_secret(secret)

    def _redact_str_value(self, text: str, key: str | None) -> str:
        stripped = text.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            try:
                parsed = json.loads(stripped)
            except ValueError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                redacted = self.redact_value(parsed)
                if redacted == parsed:
                    return text  # nothing secret: keep the original formatting byte for byte
                return json.dumps(redacted, ensure_ascii=False)
        return self.redact_text(text)

    def _sub_whole(
        self, pattern: re.Pattern[str], text: str, category: str,
        accept: Callable[[str], bool] | None = None,
    ) -> str:
        def repl(m: re.Match[str]) -> str:
            token = m.group(0)
            if MASK in token or (accept is not None and not accept(token)):
                return token
            self._count(category)
            return mask_secret(token)

        return pattern.sub(repl, text)

    def _sub_group(
        self, pattern: re.Pattern[str], text: str, category: str,
        accept: Callable[[str], bool] | None = None,
    ) -> str:
        def repl(m: re.Match[str]) -> str:
            secret = m.group("secret")
            if not secret or MASK in secret or (accept is not None and not accept(secret)):
                return m.group(0)
            self._count(category)
            start, end = m.span("secret")
            whole = m.group(0)
            base = m.start(0)
            return whole[: start - base] + mask_secret(secret) + whole[end - base:]

        return pattern.sub(repl, text)

    @staticmethod
    def _is_reference(value: str) -> bool:
        return _names_only(value, "strong")

    def _not_reference(self, value: str) -> bool:
        return not self._is_reference(value)

    @staticmethod
    def _userinfo_ok(user: str) -> bool:
        # https://git@host or https://ana@host are user names; a token is long or has digits.
        return not re.fullmatch(r"[a-z][a-z._\-]{0,15}", user)

    def _mask_cookie_pairs(self, value: str) -> str:
        # Mask each cookie's value on its own: masking the whole header keeps the last
        # 4 characters, which may be most of the final (short) cookie.
        pairs = []
        for pair in value.split(";"):
            name, eq, val = pair.partition("=")
            if eq and val.strip() and MASK not in val and name.strip().lower() not in _COOKIE_ATTRS:
                self._count("cookie")
                val = mask_secret(val.strip())
            pairs.append(f"{name}{eq}{val}")
        return ";".join(pairs)

    def _cookie(self, m: re.Match[str]) -> str:
        start, end = m.span("secret")
        base = m.start(0)
        whole = m.group(0)
        return whole[: start - base] + self._mask_cookie_pairs(m.group("secret")) + whole[end - base:]

    def _pem(self, m: re.Match[str]) -> str:
        if MASK in m.group("body") and len(m.group("body").strip()) <= len(MASK) + 4:
            return m.group(0)
        self._count("private_key")
        newline = "\\n" if "\\n" in m.group("body") else "\n"
        return f"{m.group('head')}{newline}{MASK}{newline}{m.group('tail')}"

    def _line_assign(self, m: re.Match[str]) -> str:
        return self._assign_common(m, m.group("secret"), "secret")

    def _assign(self, m: re.Match[str]) -> str:
        for group in ("esc", "dq", "sq", "bare"):
            if m.group(group) is not None:
                return self._assign_common(m, m.group(group), group)
        return m.group(0)

    def _assign_common(self, m: re.Match[str], value: str, group: str) -> str:
        strength = secret_name_strength(m.group("name"))
        if strength is None or _names_only(value, strength):
            return m.group(0)
        self._count("assignment")
        start, end = m.span(group)
        base = m.start(0)
        whole = m.group(0)
        return whole[: start - base] + mask_secret(value) + whole[end - base:]


# --------------------------------------------------------------------------- module helpers

def redact_text(text: str, known_secrets: Iterable[str] = ()) -> str:
    """One-shot :meth:`Redactor.redact_text` (counts discarded)."""
    return Redactor(known_secrets).redact_text(text)


def redact_value(obj: Any, known_secrets: Iterable[str] = ()) -> Any:
    """One-shot :meth:`Redactor.redact_value` (counts discarded)."""
    return Redactor(known_secrets).redact_value(obj)


def redact_session_metadata(
    session: Mapping[str, Any], known_secrets: Iterable[str] = ()
) -> dict[str, Any]:
    """One-shot :meth:`Redactor.redact_session_metadata` (counts discarded)."""
    return Redactor(known_secrets).redact_session_metadata(session)
