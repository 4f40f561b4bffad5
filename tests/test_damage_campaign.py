"""The damage campaign: damage every kind of store file every way, and hold the store to its model.

Stores. `_damagechild.py build` writes a small store (64 KiB commit-log segments, 8-unit
consume-queue files, 128-entry index files: three segments, up to seven files a queue, three
index files) holding three topics, keys and tags, a batch, a delayed message (level 18) and a
timer message (due in a day), a transactional half message left UNKNOW and a consumer group's committed offsets, so every file
kind exists; the model is what was acknowledged (each `SendResult`'s topic, queue, queue
offset, msg_id, body and keys, plus where the record lies in the commit log). Three states,
each built once per module and copied for every case: `clean` (closed); `crash` (written
under SYNC_FLUSH, the writer SIGKILLed after its last acknowledgement: `abort` and a dead
pid in `lock`, an index and checkpoint as the flush service left them); `crash-async`
(ASYNC_FLUSH, SIGKILLed after an explicit flush of everything, so the model is what was
flushed and the checkpoint is current: recovery starts late in the log).

Cases. File kinds: the first, a middle and the last commit-log segment; the first, a middle
and the last file of one consume queue; the first and last index file; `checkpoint`, `abort`,
`lock`; the delayed, timer and half messages' queue files; each config JSON alone and together
with its `.bak` (`+bak`: both get the damage, so the fallback is gone too). Damage kinds:
delete, truncate to half and to 0, zero the middle third of the written bytes or the whole
file, flip three seeded bytes of the written part, garbage (seeded random bytes of the same
size), a directory in the file's place. Every file kind x damage kind on `clean` and `crash` (on `crash-async`, the files the flush mode
shapes: segments, queue files, index files, checkpoint); damage that cannot apply (truncating
a file that is empty or absent in that state) is left out. Ids read `<state>-<file>-<damage>`.

Oracle. Each case runs in a process forked by `_damagechild.py serve` (a SIGBUS or a hang
fails the case with the stacks, never pytest): `mqlite.verify.verify_store` on the damaged
store, then `mqlite.open` (a writer, no settings: it reads `store.json` as a user's reopen
does; its clock is the build's `ManualClock` a minute on, so the store's bytes and what is
due are the same every run). The case passes when
  (a) open refuses with `mqlite.StoreCorruptedError` (the only clean refusal: the message
      names the file and the fix), or
  (b) open succeeds and every acknowledged message is reachable: by `query_message_by_offset`
      at its acknowledged (topic, queue, offset) with its body, by `view_message(msg_id)`
      (the index must be rebuilt when it was damaged), by `query_message` for each of its
      keys, and through a fresh group's pulls of each queue from its first offset (which
      must never stall: each pull advances or reports the queue's end); the delayed and the
      timer message wait in their system queues at or after their delivery cursors (or, a
      cursor past them, were delivered to their topic); a copy of the
      half message waits at or after the check-back's committed offset; the group's
      committed offsets never move forward (and stay as committed unless the damaged file
      is the offset table itself or a commit-log segment: a lost table only re-delivers);
      and a message sent after the recovery is stored and found by offset, id and key.
Never: a hang, a crash, an exception that is not an `mqlite.MQLiteError` (from verify, the
read-only probe, open, any check or close).

The rule for lost data. Only commit-log damage can destroy an acknowledged message: the
consume queues, the index, the checkpoint and the config files can all be rebuilt or
re-derived from the log (or their loss only re-delivers). So a loss is excused only when the
damaged file is a commit-log segment and the lost message's record bytes overlap the
destroyed bytes (the deleted, cut, zeroed, flipped or overwritten range); losing a record the
damage did not touch (for example every record after a bad one, as a truncating recovery
does) is a failure. An excused loss must be reported: `verify` on the damaged store, before
the reopen, must name a problem. And whenever `verify` says OK, a read-only open of the
damaged store must reach every acknowledged message (a clean verify of a store whose damage
hides data is a failure too; the writer's repair at open does not excuse it).

One exception, documented in docs/design.md: damage inside an index file's slots or entries
that leaves its 40-byte header intact is not looked for at open (a full check costs O(entries)
per open). There, lookups by key or id may miss, and that is excused only when `verify` on
the damaged store names that index file (its finding says the fix: delete the file, and the
next open rebuilds it from the log).

Set MQLITE_DAMAGE_REPORT=<file> to get every case's outcome as JSON lines (passes too).

Randomized: `test_random_damage` draws (state, any file, damage kind, offset, length) with
Hypothesis, derandomized, under the same oracle.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mqlite

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_damagechild.py")
BUILD_DEADLINE = 120.0  # seconds for a child to build a base store (a loaded 2-core machine)
CASE_TIMEOUT = 20.0  # seconds a case may take before it counts as a hang

STATES = ("clean", "crash", "crash-async")
FILE_KINDS = (
    "commitlog-first", "commitlog-middle", "commitlog-last",
    "cq-first", "cq-middle", "cq-last", "cq-schedule", "cq-timer", "cq-half",
    "index-first", "index-last",
    "checkpoint", "abort", "lock",
    "store.json", "store.json+bak", "topics.json", "topics.json+bak",
    "consumerOffset.json", "consumerOffset.json+bak", "delayOffset.json", "delayOffset.json+bak",
)
DAMAGES = ("delete", "truncate-half", "truncate-0", "zero-range", "zero-all", "flip", "garbage", "dir")
#: Damage that has nothing to act on: a cleanly closed store has no `abort`, and an empty `lock`.
_NOT_APPLICABLE = {
    ("clean", "abort"): {"delete", "truncate-half", "truncate-0", "zero-range", "zero-all", "flip"},
    ("clean", "lock"): {"truncate-half", "truncate-0", "zero-range", "zero-all", "flip"},
}
#: The delayed, timer and half messages' queues (one file each): three damages are enough there.
SYSTEM_QUEUES = {"cq-schedule": ("SCHEDULE_TOPIC_XXXX", "17"), "cq-timer": ("rmq_sys_wheel_timer", "0"),
                 "cq-half": ("RMQ_SYS_TRANS_HALF_TOPIC", "0")}
_SYSTEM_QUEUE_DAMAGES = {"delete", "zero-all", "garbage"}
#: The ASYNC_FLUSH crash differs from the SYNC_FLUSH one in the files the flush mode shapes (its
#: checkpoint is current, so recovery starts late in the log): only those are damaged there.
_ASYNC_KINDS = {"commitlog-first", "commitlog-middle", "commitlog-last", "cq-first", "cq-middle", "cq-last",
                "index-first", "index-last", "checkpoint"}
CASES = [(state, kind, damage) for state in STATES for kind in FILE_KINDS for damage in DAMAGES
         if damage not in _NOT_APPLICABLE.get((state, kind), set())
         and (kind not in SYSTEM_QUEUES or damage in _SYSTEM_QUEUE_DAMAGES)
         and (state != "crash-async" or kind in _ASYNC_KINDS)]
CQ_QUEUE = ("DmgC", "0")  # the queue with the most files


# -- base stores and the fork server -------------------------------------------------------------
@dataclass(frozen=True)
class Base:
    """A built store and its model."""

    state: str
    root: Path
    model_path: Path

    def model(self) -> dict[str, Any]:
        return json.loads(self.model_path.read_text())


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(mqlite.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    env["OPENBLAS_NUM_THREADS"] = "1"  # the server forks: no BLAS thread pool in it
    return env


def _readline(proc: subprocess.Popen[bytes], deadline: float) -> str:
    """One line of `proc`'s stdout, or AssertionError when `deadline` (time.monotonic) passes."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"child {proc.pid} printed nothing in time")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            byte = os.read(fd, 1)
            if not byte:
                raise AssertionError(f"child {proc.pid} ended (status {proc.wait()}) after {line!r}")
            line += byte
    return line.decode().rstrip("\n")


def _build(root: Path, state: str) -> Base:
    model = root.parent / f"{state}-model.json"
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, CHILD, "build", str(root), str(model), state],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=_env())
        try:
            line = _readline(proc, time.monotonic() + BUILD_DEADLINE)
            assert line == ("READY" if state.startswith("crash") else "DONE"), line
        except AssertionError as exc:
            err.seek(0)
            raise AssertionError(f"building the {state} store failed: {exc}\n{err.read().decode()[-3000:]}") from None
        finally:
            proc.kill()  # the crash state: SIGKILL after the last acknowledgement
            proc.wait(30)
            for pipe in (proc.stdin, proc.stdout):
                if pipe:
                    pipe.close()
    return Base(state, root, model)


class Server:
    """The `_damagechild.py serve` process: one verdict per case, restarted if it ever dies."""

    def __init__(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, CHILD, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self._stderr, env=_env())

    def check(self, root: Path, base: Base, *, timeout: float = CASE_TIMEOUT,
              selftest: str | None = None) -> dict[str, Any]:
        """The verdict on the damaged store at `root` (see `_damagechild.check_store`)."""
        if self.proc.poll() is not None:
            self.close_pipes()
            self.proc = self._start()
        assert self.proc.stdin is not None
        case = {"root": str(root), "model": str(base.model_path), "timeout": timeout, "selftest": selftest}
        self.proc.stdin.write((json.dumps(case) + "\n").encode())
        self.proc.stdin.flush()
        try:
            verdict: dict[str, Any] = json.loads(_readline(self.proc, time.monotonic() + timeout + 30))
        except AssertionError as exc:
            self.stop()
            self._stderr.seek(0)
            raise AssertionError(f"the fork server failed: {exc}\n{self._stderr.read().decode()[-3000:]}") from None
        return verdict

    def close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe and not pipe.closed:
                pipe.close()

    def stop(self) -> None:
        self.close_pipes()  # EOF on stdin ends the server's loop
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


@dataclass
class Campaign:
    bases: dict[str, Base]
    server: Server


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    top = tmp_path_factory.mktemp("damage-bases")
    bases = {state: _build(top / state, state) for state in STATES}
    server = Server()
    try:
        yield Campaign(bases, server)
    finally:
        server.stop()
        server._stderr.close()


# -- damage ------------------------------------------------------------------------------------------
def _files(root: Path, kind: str) -> list[Path]:
    """The file(s) of `kind` in the store at `root` (two for a `+bak` kind)."""
    def pick(folder: Path) -> list[Path]:
        return sorted(p for p in folder.iterdir() if p.is_file())

    part = kind.rsplit("-", 1)[-1]
    which = {"first": 0, "middle": None, "last": -1}.get(part, 0)

    def nth(files: list[Path]) -> Path:
        assert len(files) >= 3 or kind.startswith("index"), f"too few files for {kind}: {files}"
        return files[len(files) // 2] if which is None else files[which]

    if kind.startswith("commitlog-"):
        return [nth(pick(root / "commitlog"))]
    if kind in SYSTEM_QUEUES:
        topic, queue_id = SYSTEM_QUEUES[kind]
        return pick(root / "consumequeue" / topic / queue_id)[:1]
    if kind.startswith("cq-"):
        return [nth(pick(root / "consumequeue" / CQ_QUEUE[0] / CQ_QUEUE[1]))]
    if kind.startswith("index-"):
        return [nth(pick(root / "index"))]
    if kind in ("checkpoint", "abort", "lock"):
        return [root / kind]
    name = kind.removesuffix("+bak")
    path = root / "config" / name
    return [path, path.with_name(name + ".bak")] if kind.endswith("+bak") else [path]


def _written(data: bytes) -> int:
    """Bytes up to the last nonzero one: the part of a pre-allocated file that holds data."""
    return len(data.rstrip(b"\0"))


def damage_file(path: Path, damage: str, rng: random.Random, offset: int | None = None,
                length: int | None = None) -> list[tuple[int, int]]:
    """Damage one file; returns the destroyed byte ranges [start, end) in the file's coordinates.

    `offset`/`length` place zero-range, flip and garbage-range damage (the random variant);
    by default zero-range takes the middle third of the written bytes and flip three of them.
    """
    data = path.read_bytes() if path.exists() else b""
    size = len(data)
    if damage == "delete":
        path.unlink(missing_ok=True)
        return [(0, size)]
    if damage == "dir":
        path.unlink(missing_ok=True)
        path.mkdir()
        return [(0, size)]
    if damage in ("truncate-half", "truncate-0", "truncate-at"):
        cut = {"truncate-half": size // 2, "truncate-0": 0}.get(damage, offset or 0)
        os.truncate(path, cut)
        return [(cut, size)]
    if damage in ("zero-all", "garbage"):
        new = bytes(size) if damage == "zero-all" else rng.randbytes(max(size, 16))
        path.write_bytes(new)
        return [(0, size)]
    used = max(_written(data), 1)
    buf = bytearray(data)
    if damage in ("zero-range", "garbage-range"):
        start = used // 3 if offset is None else min(offset, size)
        end = min(size, start + (max(used // 3, 1) if length is None else length))
        buf[start:end] = bytes(end - start) if damage == "zero-range" else rng.randbytes(end - start)
        path.write_bytes(bytes(buf))
        return [(start, end)]
    assert damage == "flip", damage
    positions = [rng.randrange(used) for _ in range(3)] if offset is None else [min(offset, max(size - 1, 0))]
    for pos in positions:
        if pos < size:
            buf[pos] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(buf))
    return [(pos, pos + 1) for pos in positions if pos < size]


def destroyed_log_ranges(path: Path, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Commit-log coordinates of ranges destroyed in a segment (a segment is named by its first byte)."""
    if path.parent.name != "commitlog" or not path.name.isdigit():
        return []
    base = int(path.name)
    return [(base + start, base + end) for start, end in ranges if end > start]


# -- judging ---------------------------------------------------------------------------------------------
def _overlaps(entry: dict[str, Any], ranges: list[tuple[int, int]]) -> bool:
    start, end = entry["offset"], entry["offset"] + entry["size"]
    return any(start < r_end and r_start < end for r_start, r_end in ranges)


def _entry(model: dict[str, Any], msg: Any) -> dict[str, Any] | None:
    if isinstance(msg, int):
        return model["messages"][msg]  # type: ignore[no-any-return]
    if msg in ("delayed", "timer", "half"):
        return model[msg]  # type: ignore[no-any-return]
    return None


#: The index file header's size: damage past it leaves a file that opens (see the module docstring).
INDEX_HEADER_SIZE = 40


def judge(verdict: dict[str, Any], model: dict[str, Any], destroyed: list[tuple[int, int]],
          offsets_damaged: bool, index_interior: list[str] | None = None) -> list[str]:
    """Why the verdict breaks the oracle (the module docstring); empty when it holds.

    `index_interior`: index files damaged past their header only; key and id lookups that
    miss are excused when verify named one of them.
    """
    problems = [f"raised a non-mqlite exception: {raw}" for raw in verdict.get("raw", [])]
    named = [name for name in index_interior or []
             if any(str(p).startswith(f"index {name}:") for p in verdict.get("verify_problems") or [])]
    outcome = verdict["outcome"]
    if outcome == "refused":
        return problems
    if outcome != "opened":
        return problems + [f"{outcome}: {verdict.get('error')}"]
    excused, unexcused = [], []
    for loss in verdict["losses"]:
        entry = _entry(model, loss["msg"])
        if loss["what"] == "offsets-back" and (offsets_damaged or destroyed):
            continue  # an offset table lost to its own damage (or a cut log) only re-delivers
        if entry is not None and _overlaps(entry, destroyed):
            excused.append(loss)
        elif named and loss["what"] in ("key", "view"):
            continue  # verify named the damaged index file and its fix
        else:
            unexcused.append(loss)
    if unexcused:
        problems.append(f"{len(unexcused)} losses the damage does not explain (first: "
                        + "; ".join(f"{x['what']} {x['msg']}: {x['detail']}" for x in unexcused[:4]) + ")")
        kinds = sorted({x["what"] for x in unexcused})
        problems.append(f"  lost kinds: {kinds}, messages: {len({x['msg'] for x in unexcused})}")
    if excused and verdict["verify_ok"]:
        problems.append(f"{len({x['msg'] for x in excused})} destroyed messages lost, and verify said OK")
    hidden = verdict.get("hidden") or []
    if named:
        hidden = [x for x in hidden if x["what"] not in ("key", "view")]
    if verdict["verify_ok"] and hidden:
        problems.append(f"verify said OK but the damaged store hides data from a reader ({len(hidden)} misses; "
                        f"first: {hidden[0]['what']} {hidden[0]['msg']}: {hidden[0]['detail']})")
    return problems


def _explain(verdict: dict[str, Any]) -> str:
    return (f"verify ok={verdict.get('verify_ok')} problems={verdict.get('verify_problems')}\n"
            f"recovery={verdict.get('recovery')}\nlog={verdict.get('log')}")


def run_case(campaign: Campaign, tmp: Path, case_id: str, state: str, kinds_and_damage: list[tuple[str, str]],
             seed: int, offset: int | None = None, length: int | None = None) -> None:
    """Copy `state`'s base store, apply the damage, and assert the oracle on the fork server's verdict."""
    base = campaign.bases[state]
    root = tmp / "store"
    shutil.copytree(base.root, root)
    rng = random.Random(seed)
    destroyed: list[tuple[int, int]] = []
    offsets_damaged = False
    index_interior: list[str] = []
    for kind, damage in kinds_and_damage:
        for path in _files(root, kind) if not kind.startswith("/") else [root / kind[1:]]:
            if not path.exists() and damage != "dir":
                continue  # e.g. store.json.bak: store.json is rewritten only when a setting changed
            ranges = damage_file(path, damage, rng, offset, length)
            destroyed += destroyed_log_ranges(path, ranges)
            offsets_damaged |= path.name.startswith("consumerOffset.json")
            if path.parent.name == "index" and path.is_file() and ranges and all(
                    start >= INDEX_HEADER_SIZE for start, _ in ranges):
                index_interior.append(path.name)
    verdict = campaign.server.check(root, base)
    problems = judge(verdict, base.model(), destroyed, offsets_damaged, index_interior)
    _record(case_id, verdict, problems)
    if problems:  # the verdict says it all: no Python traceback of the harness
        pytest.fail(f"{case_id} (seed {seed})\n" + "\n".join(problems) + "\n" + _explain(verdict), pytrace=False)
    shutil.rmtree(root)  # a passing case's copy is not worth its disk (a failing one stays to be looked at)


def _record(case_id: str, verdict: dict[str, Any], problems: list[str]) -> None:
    """With MQLITE_DAMAGE_REPORT=<file>, append every case's outcome as a JSON line (passes too:
    whether a case passed by a repair or by a refusal is worth knowing)."""
    path = os.environ.get("MQLITE_DAMAGE_REPORT")
    if path:
        row = {"case": case_id, "outcome": verdict.get("outcome"), "verify_ok": verdict.get("verify_ok"),
               "recovery": verdict.get("recovery"), "error": (verdict.get("error") or "")[:300],
               "problems": problems}
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


# -- the harness itself ----------------------------------------------------------------------------
def test_a_crashing_case_fails_the_case_not_pytest(campaign: Campaign, tmp_path: Path) -> None:
    verdict = campaign.server.check(tmp_path, campaign.bases["clean"], selftest="sigbus")
    assert verdict["outcome"] == "crash" and "signal 7" in verdict["error"], verdict
    assert judge(verdict, campaign.bases["clean"].model(), [], False)


def test_a_hanging_case_fails_the_case_with_its_stacks(campaign: Campaign, tmp_path: Path) -> None:
    verdict = campaign.server.check(tmp_path, campaign.bases["clean"], timeout=1.5, selftest="hang")
    assert verdict["outcome"] == "hang" and "_selftest" in verdict["error"], verdict
    assert judge(verdict, campaign.bases["clean"].model(), [], False)


def _verdict(losses: list[dict[str, Any]], verify_ok: bool, hidden: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"outcome": "opened", "raw": [], "losses": losses, "verify_ok": verify_ok, "hidden": hidden or []}


def test_the_rule_for_lost_data() -> None:
    """Only a destroyed record may be lost, and only with verify saying so; offsets only go back."""
    model = {"messages": [{"offset": 0, "size": 100}, {"offset": 100, "size": 100}],
             "delayed": {"offset": 200, "size": 50}, "timer": {"offset": 300, "size": 50},
             "half": {"offset": 250, "size": 50}}
    lost = [{"what": "offset", "msg": 0, "detail": ""}]
    assert judge(_verdict(lost, verify_ok=False), model, [(50, 60)], False) == []
    assert judge(_verdict(lost, verify_ok=True), model, [(50, 60)], False)  # a silent loss
    assert judge(_verdict(lost, verify_ok=False), model, [(100, 110)], False)  # not the destroyed record
    assert judge(_verdict([{"what": "half", "msg": "half", "detail": ""}], False), model, [(0, 10)], False)
    assert judge(_verdict([{"what": "timer", "msg": "timer", "detail": ""}], False), model, [(310, 311)], False) == []
    assert judge(_verdict([{"what": "stall", "msg": "DmgC/0", "detail": ""}], False), model, [(0, 300)], False)
    back = [{"what": "offsets-back", "msg": "DmgC/0", "detail": ""}]
    assert judge(_verdict(back, True), model, [], True) == []
    assert judge(_verdict(back, True), model, [], False)
    assert judge(_verdict([{"what": "offsets", "msg": "DmgC/0", "detail": ""}], True), model, [], True)
    hidden = [{"what": "view", "msg": 1, "detail": ""}]
    assert judge(_verdict([], verify_ok=True, hidden=hidden), model, [], False)
    assert judge(_verdict([], verify_ok=False, hidden=hidden), model, [], False) == []
    assert judge({"outcome": "refused", "raw": []}, model, [], False) == []
    assert judge({"outcome": "open-raised", "raw": [], "error": "TypeError"}, model, [], False)


# -- the matrix ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", STATES)
def test_undamaged_base_passes_the_oracle(campaign: Campaign, tmp_path: Path, state: str) -> None:
    """The control: an undamaged copy passes (so a failing case is the damage's doing, not the harness's)."""
    run_case(campaign, tmp_path, f"{state}-undamaged", state, [], seed=0)


@pytest.mark.parametrize(("state", "kind", "damage"), CASES, ids=[f"{s}-{k}-{d}" for s, k, d in CASES])
def test_damage(campaign: Campaign, tmp_path: Path, state: str, kind: str, damage: str) -> None:
    case_id = f"{state}-{kind}-{damage}"
    run_case(campaign, tmp_path, case_id, state, [(kind, damage)], seed=zlib.crc32(case_id.encode()))


# -- random damage ----------------------------------------------------------------------------------
_RANDOM_DAMAGES = ("delete", "truncate-at", "zero-range", "garbage-range", "flip", "dir")


# No shrinking: a failing example is reported as drawn (shrinking would re-run the oracle
# dozens of times); the drawn values are in the report.
@settings(max_examples=12, derandomize=True, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_damage(campaign: Campaign, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Any file of either base store, damaged at a drawn place: the same oracle."""
    state = data.draw(st.sampled_from(STATES), label="state")
    base = campaign.bases[state].root
    files = sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())
    name = data.draw(st.sampled_from(files), label="file")
    size = (base / name).stat().st_size
    damage = data.draw(st.sampled_from(_RANDOM_DAMAGES), label="damage")
    offset = data.draw(st.integers(0, max(size - 1, 0)), label="offset")
    length = data.draw(st.integers(1, 4096), label="length")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    run_case(campaign, tmp_path_factory.mktemp("random"), f"random-{state}-{name}-{damage}@{offset}+{length}",
             state, [("/" + name, damage)], seed, offset, length)
