"""A seeded, realistic message corpus for the benchmarks (no downloads, no randomness across runs).

English and CJK prose (Chinese with some Japanese and Korean), Russian and Spanish chat,
assistant turns with tool-call JSON, tool outputs from a few hundred bytes to 100 kB
(log-uniform, like terminal dumps), and a share of cron and subagent sessions. The same rows are
loaded into every layout being compared.

``CORPUS_VERSION`` names the generator: bump it whenever the rows it yields change, so corpora
cached on disk (``benchmarks/scale.py``) are rebuilt instead of being compared with new ones.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass

DEFAULT_MESSAGES = 20_000
SEED = 20_260_101
CORPUS_VERSION = 2

EN_WORDS = (
    "the of and to in is that for it with as was on be by this are or from at an which have "
    "not but they more one all we can there has their will would been if when about so no "
    "docker deployment kubernetes container image build compose volume network port service "
    "python function module import class method return value error exception traceback test "
    "database query index table column migration schema commit branch merge rebase review "
    "server client request response header status timeout retry cache memory buffer thread "
    "config option setting default path file directory permission user group process signal "
    "search result snippet ranking token phrase prefix substring latency throughput storage"
).split()
ZH_CHARS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子"
    "说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机"
    "当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心"
    "记忆断裂广西桂林漓江旅游部署通信协议服务端配置会议纪要昨晚今天数据库索引查询迁移容器镜像"
)
# Fixed phrases dropped into prose, so phrase and substring queries have real answers.
ZH_PHRASES = ("数据库迁移", "记忆断裂", "会议纪要", "广西桂林", "部署服务")
JA_TEXT = ("パスフレーズを入力してください", "通信の問題が発生しました", "設定ファイルを確認する",
           "データベースの移行が完了しました")
KO_TEXT = ("배포 서버 설정을 확인해 주세요", "데이터베이스 마이그레이션이 끝났습니다",
           "어제 회의 내용을 정리했습니다", "통신 오류가 다시 발생했어요")
RU_WORDS = ("сервер база данных ошибка развертывание контейнер запрос ответ индекс поиск "
            "настройка файл журнал пользователь сессия миграция проверка вчера сегодня").split()
ES_WORDS = ("el la de que y en los servidor despliegue contenedor base datos error búsqueda "
            "configuración migración índice sesión usuario registro también después").split()
TOOLS = ("terminal", "read_file", "write_file", "search_files", "web_fetch", "python_exec")
LOG_LINES = (
    "INFO  [{n}] request handled in {ms}ms path=/api/v1/items/{n}",
    "DEBUG cache miss key=session:{n} shard={s}",
    "WARN  retrying connection to db-{s}.internal:5432 attempt={a}",
    "ERROR Traceback (most recent call last): File \"app/worker_{s}.py\", line {n}",
    "  {n:>6} {ms:>5} root  S  /usr/bin/python3 -m worker --queue q{s}",
    "drwxr-xr-x  2 root root 4096 Jan {a} 12:{s:02d} build_{n}",
)


Session = tuple[str, str, str, float]  # id, source, model, started_at


@dataclass(frozen=True)
class Row:
    session_id: str
    role: str
    content: str
    tool_name: str | None
    tool_calls: str | None
    timestamp: float


@dataclass(frozen=True)
class Corpus:
    sessions: list[Session]
    rows: list[Row]

    @property
    def text_bytes(self) -> int:
        return sum(len(r.content.encode()) for r in self.rows)


def _english(rng: random.Random, words: int) -> str:
    # Zipf-like: common words dominate, as in real prose.
    if rng.random() < 0.05:
        words = max(words - 2, 1)
        tail = " docker deployment"
    else:
        tail = ""
    picks = [EN_WORDS[min(int(rng.paretovariate(1.1)) - 1, len(EN_WORDS) - 1)]
             if rng.random() < 0.6 else rng.choice(EN_WORDS) for _ in range(words)]
    return " ".join(picks).capitalize() + tail + "."


def _chinese(rng: random.Random, chars: int) -> str:
    out = []
    for i in range(chars):
        if rng.random() < 0.02:
            out.append(rng.choice(ZH_PHRASES))
        out.append(rng.choice(ZH_CHARS))
        if i and i % rng.randint(8, 20) == 0:
            out.append("，")
    return "".join(out) + "。"


def _words(rng: random.Random, vocabulary: list[str], words: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(words)).capitalize() + "."


def _prose(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:
        return _english(rng, rng.randint(8, 120))
    if kind < 0.72:
        return _chinese(rng, rng.randint(10, 150))
    if kind < 0.8:
        return rng.choice(JA_TEXT) + " " + _english(rng, rng.randint(5, 30))
    if kind < 0.84:
        return rng.choice(KO_TEXT) + " " + _english(rng, rng.randint(5, 30))
    if kind < 0.88:
        return _words(rng, RU_WORDS, rng.randint(8, 60))
    if kind < 0.92:
        return _words(rng, ES_WORDS, rng.randint(8, 60))
    return _chinese(rng, rng.randint(5, 40)) + " docker " + _english(rng, rng.randint(5, 30))


def _tool_output(rng: random.Random) -> str:
    size = int(math.exp(rng.uniform(math.log(300), math.log(100_000))))
    lines, total = [], 0
    while total < size:
        line = rng.choice(LOG_LINES).format(n=rng.randint(1, 99999), ms=rng.randint(1, 900),
                                            s=rng.randint(0, 59), a=rng.randint(1, 28))
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def _tool_calls(rng: random.Random) -> str:
    tool = rng.choice(TOOLS)
    if tool == "terminal":
        args = {"command": f"docker ps -a --filter name=svc{rng.randint(1, 99)}"}
    else:
        args = {"path": f"/srv/app/module_{rng.randint(1, 500)}.py"}
    return json.dumps([{"id": f"call_{rng.randint(1, 10**9)}", "type": "function",
                        "function": {"name": tool, "arguments": json.dumps(args)}}])


def generate(messages: int, seed: int = SEED) -> Iterator[tuple[Session, list[Row]]]:
    """Sessions of 10-60 messages, one at a time, until ``messages`` rows were yielded.

    A corpus of 200k messages holds about 700 MB of text: streaming it lets the scale benchmark
    load it without holding it all in memory. A prefix of a larger corpus is not a smaller
    corpus (the last session is cut), so sizes are always generated from the start.
    """
    rng = random.Random(seed)
    made, count = 0, 0
    clock = 1_700_000_000.0
    while made < messages:
        sid = f"s{count:05d}"
        count += 1
        source = rng.choices(("cli", "telegram", "discord", "cron", "subagent"),
                             weights=(60, 12, 8, 12, 8))[0]
        session = (sid, source, rng.choice(("gpt-x", "claude-y", "qwen-z")), clock)
        rows: list[Row] = []
        for _ in range(min(rng.randint(10, 60), messages - made)):
            clock += rng.uniform(1, 120)
            kind = rng.random()
            if kind < 0.35:
                rows.append(Row(sid, "user", _prose(rng), None, None, clock))
            elif kind < 0.8:
                calls = _tool_calls(rng) if rng.random() < 0.4 else None
                rows.append(Row(sid, "assistant", _prose(rng), None, calls, clock))
            else:
                rows.append(Row(sid, "tool", _tool_output(rng), rng.choice(TOOLS), None, clock))
        made += len(rows)
        yield session, rows


def build(messages: int | None = None, seed: int = SEED) -> Corpus:
    """``messages`` rows (default ``HERMES_BENCH_MESSAGES`` or 20,000), held in memory."""
    total = messages or int(os.environ.get("HERMES_BENCH_MESSAGES", DEFAULT_MESSAGES))
    sessions: list[Session] = []
    rows: list[Row] = []
    for session, chunk in generate(total, seed):
        sessions.append(session)
        rows.extend(chunk)
    return Corpus(sessions, rows)
