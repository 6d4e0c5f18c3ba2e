"""Tests for hermes_store.transfer.redact (docs/formats.md#redaction)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_store.transfer.redact import (
    MASK,
    METADATA_FIELDS,
    Redactor,
    mask_secret,
    redact_session_metadata,
    redact_text,
    redact_value,
)

# (category id, text containing the secret, the secret that must vanish)
MUST_CATCH = [
    ("openai", "key is sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQr", "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQr"),
    ("anthropic", "sk-ant-api03-AbCdEf0123456789GhIjKl-_xyz", "sk-ant-api03-AbCdEf0123456789GhIjKl-_xyz"),
    ("ghp", "token ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("github_pat", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH",
     "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH"),
    ("gho", "gho_16C7e42F292c6912E7710c838347Ae178B4a", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("ghs", "ghs_16C7e42F292c6912E7710c838347Ae178B4a", "ghs_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("slack", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp"),
    ("slack_app", "xapp-1-A0123456789-1234567890123-abcdef0123", "xapp-1-A0123456789-1234567890123-abcdef0123"),
    ("google", "AIzaSyA-1234567890abcdefghijklmnopqrstuv", "AIzaSyA-1234567890abcdefghijklmnopqrstuv"),
    ("aws", "aws_access_key_id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("stripe", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("stripe_test", "sk_test_4eC39HqLyjWDarjtT1zdp7dc", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"),
    ("stripe_rk", "rk_live_4eC39HqLyjWDarjtT1zdp7dc", "rk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("sendgrid", "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",
     "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"),
    ("huggingface", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh", "hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"),
    ("replicate", "r8_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78", "r8_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78"),
    ("npm", "npm_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78", "npm_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78"),
    ("pypi", "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZjAxLTIzNDUtNjc4OS1hYmNkLWVm",
     "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZjAxLTIzNDUtNjc4OS1hYmNkLWVm"),
    ("digitalocean", "dop_v1_" + "0123456789abcdef" * 4, "dop_v1_" + "0123456789abcdef" * 4),
    ("groq", "gsk_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90", "gsk_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90"),
    ("xai", "xai-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90", "xai-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90"),
    ("tavily", "tvly-dev-Ab12Cd34Ef56Gh78Ij90Kl12", "tvly-dev-Ab12Cd34Ef56Gh78Ij90Kl12"),
    ("exa", "exa_Ab12Cd34Ef56Gh78Ij90Kl12", "exa_Ab12Cd34Ef56Gh78Ij90Kl12"),
    ("perplexity", "pplx-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78", "pplx-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78"),
    ("fal", "fal_Ab12Cd34Ef56Gh78Ij90Kl12", "fal_Ab12Cd34Ef56Gh78Ij90Kl12"),
    ("firecrawl", "fc-0123456789abcdef0123456789abcdef", "fc-0123456789abcdef0123456789abcdef"),
    ("notion", "ntn_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78", "ntn_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78"),
    ("fireworks", "fw_Ab12Cd34Ef56Gh78Ij90Kl12", "fw_Ab12Cd34Ef56Gh78Ij90Kl12"),
    ("gitlab", "glpat-Ab12Cd34Ef56Gh78Ij90", "glpat-Ab12Cd34Ef56Gh78Ij90"),
    ("langfuse_pk", "pk-lf-01234567-89ab-cdef-0123-456789abcdef", "pk-lf-01234567-89ab-cdef-0123-456789abcdef"),
    ("langfuse_sk", "sk-lf-01234567-89ab-cdef-0123-456789abcdef", "sk-lf-01234567-89ab-cdef-0123-456789abcdef"),
    ("fernet", "gAAAAABlZ0123456789abcdefABCDEF_-0123456789abcdefghijklmnopqrstuv==",
     "gAAAAABlZ0123456789abcdefABCDEF_-0123456789abcdefghijklmnopqrstuv=="),
    ("env_assign", "OPENAI_BASE_TOKEN=q9w8e7r6t5y4u3i2", "q9w8e7r6t5y4u3i2"),
    ("export_assign", "export DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    ("yaml", "database:\n  password: correct horse battery staple\n", "correct horse battery staple"),
    ("toml", 'api_key = "a1b2c3d4e5f6g7h8"', "a1b2c3d4e5f6g7h8"),
    ("ini", "[auth]\nclient_secret=zyx987wvu654", "zyx987wvu654"),
    ("short_password", "password: x9", "x9"),
    ("cli_flag", "mysql --password=Tr0ub4dor3 -u root", "Tr0ub4dor3"),
    ("json_field", '{"apiKey":"Zq1Wx2Ec3Rv4Tb5Yn6"}', "Zq1Wx2Ec3Rv4Tb5Yn6"),
    ("json_escaped", r'{\"apiKey\":\"Zq1Wx2Ec3Rv4Tb5Yn6\"}', "Zq1Wx2Ec3Rv4Tb5Yn6"),
    ("python_repr", "{'access_token': 'Zq1Wx2Ec3Rv4Tb5Yn6', 'n': 1}", "Zq1Wx2Ec3Rv4Tb5Yn6"),
    ("bearer", "curl -H 'Authorization: Bearer Zq1Wx2Ec3Rv4Tb5Yn6Um7'", "Zq1Wx2Ec3Rv4Tb5Yn6Um7"),
    ("basic", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("proxy_auth", "Proxy-Authorization: Bearer Zq1Wx2Ec3Rv4Tb5Yn6Um7", "Zq1Wx2Ec3Rv4Tb5Yn6Um7"),
    ("x_api_key", "X-Api-Key: 9f8e7d6c5b4a39281706", "9f8e7d6c5b4a39281706"),
    ("cookie", "Cookie: sessionid=Zq1Wx2Ec3Rv4; theme=dark", "Zq1Wx2Ec3Rv4"),
    ("set_cookie", "Set-Cookie: sid=Zq1Wx2Ec3Rv4Tb5; Path=/; HttpOnly", "Zq1Wx2Ec3Rv4Tb5"),
    ("telegram", "bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0 ok", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"),
    ("pem", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
     "-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"),
    ("pem_escaped", r"key\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretbody\n-----END RSA PRIVATE KEY-----",
     "MIIEowIBAAKCAQEAsecretbody"),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("phone", "call +14155550123 please", "+14155550123"),
    ("postgres", "postgres://ana:pg-S3cret@db:5432/app", "pg-S3cret"),
    ("postgresql", "postgresql://ana:pg-S3cret@db/app", "pg-S3cret"),
    ("mysql", "mysql://root:my-S3cret@localhost/db", "my-S3cret"),
    ("mongodb", "mongodb://u:mongo-S3cret@h:27017", "mongo-S3cret"),
    ("mongodb_srv", "mongodb+srv://u:mongo-S3cret@cluster0.example.net/x", "mongo-S3cret"),
    ("redis", "redis://:redis-S3cret@cache:6379/0", "redis-S3cret"),
    ("amqp", "amqp://guest:amqp-S3cret@mq:5672/", "amqp-S3cret"),
    ("https_userinfo", "git clone https://Zq1Wx2Ec3Rv4@github.com/o/r.git", "Zq1Wx2Ec3Rv4"),
    ("https_user_pass", "https://x-access-token:Zq1Wx2Ec3Rv4@github.com/o/r", "Zq1Wx2Ec3Rv4"),
    ("q_access_token", "https://api.x.io/v1?access_token=Qz9Qz9Qz9&a=1", "Qz9Qz9Qz9"),
    ("q_token", "https://x.io/cb?token=Qz9Qz9Qz9", "Qz9Qz9Qz9"),
    ("q_api_key", "https://x.io/?api_key=Qz9Qz9Qz9", "Qz9Qz9Qz9"),
    ("q_key", "https://maps.x.io/js?key=Qz9Qz9Qz9&v=3", "Qz9Qz9Qz9"),
    ("q_code", "http://localhost:8080/callback?code=Qz9Qz9Qz9&state=1", "Qz9Qz9Qz9"),
    ("q_signature", "https://x.io/f?signature=Qz9Qz9Qz9", "Qz9Qz9Qz9"),
    ("q_sig", "https://x.io/f?sv=1&sig=Qz9Qz9Qz9%3D", "Qz9Qz9Qz9"),
    ("q_password", "https://x.io/login?password=Qz9Qz9Qz9", "Qz9Qz9Qz9"),
    ("q_amz", "https://b.s3.amazonaws.com/k?X-Amz-Signature=9f8e7d6c5b4a&X-Amz-Date=1", "9f8e7d6c5b4a"),
]

MUST_NOT_CATCH = [
    "Secretary: Jane Doe",
    "tokenizer: bert-base-uncased",
    'key = os.getenv("API_KEY")',
    'os.getenv("API_KEY")',
    "echo $API_KEY",
    "export OPENAI_API_KEY=$API_KEY",
    "curl -H \"Authorization: Bearer ${TOKEN}\"",
    "${TOKEN}",
    "API_KEY=<your-key>",
    "api_key: <your-key>",
    "/home/ana/.config/secrets/api_key.txt",
    "~/.aws/credentials",
    "C:\\Users\\ana\\token.json",
    "PWD=/home/ana/app",
    "max_tokens=4096",
    "sorted(xs, key=len)",
    "token_count: 12345678901",
    "    token = tokens[0]",
    "the risk-assessment-framework-document-v2",
    "git@github.com:org/repo.git",
    "https://github.com/org/repo",
    "commit 3f2a9c1e0b7d4a5f6e8c9b0a1d2e3f4a5b6c7d8e",
    "id 019dabc6-8fef-7681-a054-b5bb75fcb97d",
    "Key: this is important",
]


@pytest.mark.parametrize("text,secret", [c[1:] for c in MUST_CATCH], ids=[c[0] for c in MUST_CATCH])
def test_must_catch(text: str, secret: str) -> None:
    r = Redactor()
    out = r.redact_text(text)
    assert secret not in out
    assert MASK in out
    assert sum(r.counts.values()) >= 1
    # Counts never leak values.
    assert secret not in json.dumps(r.counts)


@pytest.mark.parametrize("text", MUST_NOT_CATCH)
def test_must_not_catch(text: str) -> None:
    r = Redactor()
    assert r.redact_text(text) == text
    assert r.counts == {}


def test_mask_rule() -> None:
    assert mask_secret("short") == MASK
    assert mask_secret("a" * 17) == MASK
    assert mask_secret("abcdef0123456789wxyz") == f"abcdef{MASK}wxyz"


def test_names_stay_values_go() -> None:
    assert redact_text("OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQr") == "OPENAI_API_KEY=sk-pro***OpQr"
    assert redact_text('{"password": "hunter2"}') == '{"password": "***"}'


def test_known_secrets_exact_values() -> None:
    r = Redactor(known_secrets=["plain-words-no-pattern", "ab"])
    out = r.redact_text("the plain-words-no-pattern leaked; ab stays")
    assert "plain-words-no-pattern" not in out
    assert "ab stays" in out  # too short to be treated as a known secret
    assert r.counts == {"known_secret": 1}


def test_redact_value_recurses_and_reads_json_in_strings() -> None:
    secret = "Zq1Wx2Ec3Rv4Tb5Yn6"
    tool_calls = [{
        "id": "call_1", "type": "function",
        "function": {"name": "terminal", "arguments": json.dumps(
            {"command": f"curl -H 'X-Api-Key: {secret}' x", "env": {"GH_TOKEN": secret}}
        )},
    }]
    r = Redactor()
    out = r.redact_value(tool_calls)
    assert secret not in json.dumps(out)
    assert out[0]["id"] == "call_1"
    assert json.loads(out[0]["function"]["arguments"])["env"]["GH_TOKEN"] == mask_secret(secret)


def test_redact_value_keeps_clean_json_strings_verbatim() -> None:
    raw = '{"cmd":  "ls -la",   "n": 1}'
    assert redact_value(raw) == raw
    assert redact_value([1, None, True, 2.5, b"x"]) == [1, None, True, 2.5, b"x"]


def test_dict_keys_label_secrets() -> None:
    out = redact_value({
        "headers": {"Authorization": "Bearer Zq1Wx2Ec3Rv4", "Cookie": "a=Zq1Wx2; b=Yn6Um7"},
        "password": 123456, "max_tokens": 4096, "api_key": "$API_KEY",
    })
    assert out["headers"]["Authorization"] == "Bearer ***"
    assert "Zq1Wx2" not in out["headers"]["Cookie"] and "Yn6Um7" not in out["headers"]["Cookie"]
    assert out["password"] == MASK
    assert out["max_tokens"] == 4096
    assert out["api_key"] == "$API_KEY"


def test_session_metadata_all_fields() -> None:
    secret = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    session = {f: f"x {secret} y" for f in METADATA_FIELDS}
    session["model_config"] = json.dumps({"api_key": secret, "temperature": 0.2})
    session["origin_json"] = {"imported_from": {"path": f"/tmp/{secret}.jsonl"}}
    session["id"] = "20260915_074937_3cf8aa23"
    session["message_count"] = 3
    r = Redactor()
    out = r.redact_session_metadata(session)
    assert secret not in json.dumps(out)
    assert out["id"] == session["id"] and out["message_count"] == 3
    assert json.loads(out["model_config"])["temperature"] == 0.2
    assert redact_session_metadata({"title": None, "cwd": "/home/ana/app"}) == {
        "title": None, "cwd": "/home/ana/app"}


def test_redact_message_skips_structural_columns() -> None:
    secret = "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQr"
    msg = {"id": 7, "role": "tool", "timestamp": 1.5, "content": f"out {secret}",
           "reasoning": f"I saw {secret}", "tool_call_id": "call_1", "tool_calls": None}
    out = Redactor().redact_message(msg)
    assert secret not in json.dumps(out)
    assert out["id"] == 7 and out["timestamp"] == 1.5 and out["tool_call_id"] == "call_1"


def test_idempotent_and_counts_once() -> None:
    text = "\n".join(c[1] for c in MUST_CATCH)
    r = Redactor()
    once = r.redact_text(text)
    counted = dict(r.counts)
    r2 = Redactor()
    assert r2.redact_text(once) == once
    assert r2.counts == {}
    assert sum(counted.values()) >= len(MUST_CATCH) - 5  # a few lines hold two matches' worth


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_never_raises_and_is_stable(text: str) -> None:
    once = redact_text(text)
    assert isinstance(once, str)
    assert redact_text(once) == once
