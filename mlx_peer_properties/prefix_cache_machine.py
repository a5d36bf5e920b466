"""One state machine for every prefix-caching engine: served == uncached, reuse as documented, eviction, persistence,
failure; an engine is put under it by a `PrefixEngine` adapter (`ncm_verify.peers.prefix_engines`).

A stream of greedy requests is drawn to hit every reuse case: the same prompt again; a stored key (a prompt and its
completion) as the prompt; a prefix of a stored key; an extension of one (a chat continuation: key + a new turn);
a stored block after another prefix; a stored key's tail at the start (a position-blind lookup); a block repeated;
one token changed; prompts longer than the sliding window; several prompts in one batch beside uncached ones; fills
until the policy evicts, then the evicted prompt again.
What each run checks is chosen by `checks` (one test node per rule, the same stream):

1. served == uncached: greedy tokens exactly (a near tie of the oracle excused, `tolerances.SERVED_NEAR_TIE`), each
   log-probability within `tolerances.SERVED_LOGPROBS[dtype]` of an uncached full forward of a fresh model;
2. the reported reused count equals the documented policy's (`adapter.policy()`, a `LongestPrefixLRU`), and the
   run sees hits (no vacuous cold-cache pass);
3. an evicted entry is never served (the evicted prompt's reuse is what the remaining entries allow, its tokens the
   uncached ones), and reusing an entry never changes it: the same prompt later gets the same response;
4. with a draft model: rule 1 on every response, and `adapter.audit()` (where it has one) after each request;
5. ``persist``/``restore``: a restored cache serves its keys as before; another model's file, a truncated file,
   a flipped byte are refused (an exception) or, if taken, never change what is served;
6. after ``adapter.fail()`` (a request the engine must refuse) the engine keeps serving.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from ncm_verify.peers.prefix_engines import EngineModel, NotRefused, PrefixEngine, Served, Uncached
from ncm_verify.tolerances import SERVED_LOGPROBS, SERVED_NEAR_TIE

MAX_TOKENS = 3
MAX_PROMPT = 14
CAPACITY = 3
"""Entries the engine is started with: small, so that fills evict within a run."""
RULES = {1: "served == uncached", 2: "reuse as documented", 3: "eviction and reuse", 4: "speculative",
         5: "persistence", 6: "serves after a failure"}  # fmt: skip

_ORACLES: dict[Path, Uncached] = {}


def oracle(model: EngineModel) -> Uncached:
    """One uncached model per folder, its rows memoised across runs (a fresh model: never an engine's)."""
    if model.path not in _ORACLES:
        _ORACLES[model.path] = Uncached(model)
    return _ORACLES[model.path]


def assert_served_equals_uncached(served: Served, model: EngineModel, *, call: str, engine=None) -> None:
    """Rule 1 for one response: tokens exactly (up to an oracle near tie), log-probabilities within tolerance. The
    oracle is mlx-lm's model class, or an engine's own ``uncached_rows`` where it serves another implementation of the
    family (mlx-vlm's models: the two differ by roundoff alone, 2e-4 nats on a one-token hybrid prompt)."""
    tolerance, tie = SERVED_LOGPROBS[model.dtype], SERVED_NEAR_TIE[model.dtype]
    rows = getattr(engine, "uncached_rows", oracle(model).rows)(served.prompt + served.tokens)
    start = len(served.prompt) - 1
    reported = served.logprobs if served.logprobs is not None else (None,) * len(served.tokens)
    for i, (token, logprob) in enumerate(zip(served.tokens, reported)):
        row = rows[start + i]
        best = int(row.argmax().item())
        want = float(row[token].item())
        if token != best:
            gap = float(row[best].item()) - want
            assert gap <= tie, (
                f"rule 1: served {list(served.tokens)} for prompt {list(served.prompt)} (reused "
                f"{served.reused}): first divergent token at {i}: {token} where the uncached argmax is {best} "
                f"({gap:.3g} nats above, near-tie margin {tie})\n  call: {call}"
            )
            return  # a near tie: the rest is another, equally greedy, sequence
        assert logprob is None or abs(logprob - want) <= tolerance, (
            f"rule 1: prompt {list(served.prompt)} (reused {served.reused}), token {i} ({token}): served "
            f"log-probability {logprob:.6g}, uncached {want:.6g} (gap {abs(logprob - want):.3g} > {tolerance}, "
            f"{model.dtype})\n  call: {call}"
        )


def assert_serves_after_a_failed_request(
    engine: PrefixEngine, model: EngineModel, first: tuple[int, ...], later: tuple[int, ...], *, call: str
) -> str:
    """Rule 6 on a started engine: `first` served (stored), a request it must refuse (`engine.fail()`, which returns
    the refusal and raises where there was none), then `first` again and `later`, one at a time (what batching does
    is rule 1's): each served, and as uncached. Returns the refusal; an engine that answers the request instead
    (`NotRefused`) makes the test not applicable, saying what it answered."""
    assert_served_equals_uncached(engine.serve([first], MAX_TOKENS)[0], model, call=f"{call}: before the failure")
    try:
        refusal = engine.fail()
    except NotRefused as answered:
        import pytest

        pytest.skip(f"not applicable: {answered}")
    for prompts in ([first], [later]):
        try:
            served = engine.serve(prompts, MAX_TOKENS)
        except Exception as error:  # noqa: BLE001
            raise AssertionError(
                f"rule 6: after the refused request ({refusal}), serve({[list(p) for p in prompts]}) raised "
                f"{error!r}\n  call: {call}"
            ) from error
        for response in served:
            assert_served_equals_uncached(response, model, call=f"{call}: after the refused request ({refusal})")
    return refusal


class PrefixCacheMachine(RuleBasedStateMachine):
    """Requests through one engine; `bind` sets the engine factory, the model folder and the checks."""

    factory: Callable[[], PrefixEngine]
    model: EngineModel
    checks: frozenset[int] = frozenset({1})
    other_model: EngineModel | None = None
    avoid: frozenset[str] = frozenset()
    """Rules this run leaves out: a case whose known finding has a test of its own and would end every run."""
    hits: list[int]
    """Shared across a test's runs: the reuse counts seen (rule 2 needs some above 0)."""

    def __init__(self):
        super().__init__()
        self.engine: PrefixEngine | None = None
        self.keys: list[tuple[int, ...]] = []
        self.prompts: list[tuple[int, ...]] = []
        self.responses: dict[tuple[int, ...], Served] = {}
        self.log: list[str] = []
        self.policy = None
        self.folder = Path(tempfile.mkdtemp(prefix="prefix-machine-"))

    def teardown(self):
        if self.engine is not None:
            self.engine.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # --- the stream ---

    def call(self, text: str) -> str:
        return (
            f"{self.engine.name if self.engine else '?'} on {self.model.family} {self.model.dtype} "
            f"({self.model.path.name}); requests so far (last 6): {'; '.join(self.log[-6:])}; now {text}"
        )

    def tokens(self, minimum: int = 1, maximum: int = MAX_PROMPT):
        return st.lists(st.integers(0, self.model.vocab - 1), min_size=minimum, max_size=maximum).map(tuple)

    @initialize(data=st.data())
    def start(self, data):
        self.engine = type(self).factory()
        self.engine.start(self.model, CAPACITY)
        self.policy = self.engine.policy() if hasattr(self.engine, "policy") else None
        first = data.draw(self.tokens(2), label="first prompt")
        self.send([first], "a first prompt")
        self.send([first], "the same prompt again")  # every run sees a hit where the policy reuses
        (again,) = self.send([first], "the same prompt a third time")
        turn = data.draw(self.tokens(2, 3), label="first turn")
        self.send([again.key + turn], "a chat continuation of the first exchange")
        if 5 in self.checks and "persist" in self.engine.supports:  # every damage once a run, then as drawn
            for damage in (None, "truncated", "flipped byte", "another model"):
                self.persist_case(data, damage)

    def send(self, prompts: Sequence[tuple[int, ...]], why: str) -> list[Served]:
        prompts = [tuple(p[: MAX_PROMPT + 2 * MAX_TOKENS]) or (0,) for p in prompts]
        if "a_stored_key" in self.avoid and self.policy is not None:
            prompts = self.not_held_keys(prompts)
        if len(prompts) > 1 and "batch" not in self.engine.supports:
            return [s for p in prompts for s in self.send([p], why + " (one at a time: no batch)")]
        text = f"serve({[list(p) for p in prompts]}, max_tokens={MAX_TOKENS})  # {why}"
        self.log.append(text)
        call = self.call(text)
        expected = [self.policy.expected_reuse(p) if self.policy is not None else None for p in prompts]
        served = self.engine.serve(prompts, MAX_TOKENS)
        assert len(served) == len(prompts), f"{len(served)} responses for {len(prompts)} prompts\n  call: {call}"
        for prompt, response, want in zip(prompts, served, expected):
            assert response.prompt == prompt, f"response for {list(response.prompt)}, not {list(prompt)}"
            if response.reused is not None:
                type(self).hits.append(response.reused)
            if 1 in self.checks or 4 in self.checks:
                assert_served_equals_uncached(response, self.model, call=call, engine=self.engine)
            beside = [p for p in prompts if p != prompt and p[:1] == prompt[:1]]  # reuse of a row beside: timing
            if 2 in self.checks and want is not None and response.reused is not None and not beside:
                assert response.reused == want[0], (
                    f"rule 2: prompt {list(prompt)}: the engine reports {response.reused} tokens reused, its "
                    f"documented policy {want[0]} (from the entry {list(want[1] or ())}; held, least recent first: "
                    f"{[list(k) for k in self.policy.held]})\n  call: {call}"
                )
            if 3 in self.checks and prompt in self.responses:
                before = self.responses[prompt]
                assert response.tokens == before.tokens, (
                    f"rule 3: prompt {list(prompt)} served {list(response.tokens)} (reused {response.reused}), "
                    f"earlier {list(before.tokens)} (reused {before.reused})\n  call: {call}"
                )
            self.responses.setdefault(prompt, response)
        if 4 in self.checks and hasattr(self.engine, "audit"):
            self.engine.audit(call)
        for prompt, response, want in zip(prompts, served, expected):
            if self.policy is not None:
                self.policy.touch(want[1] if want else None)
                self.policy.store(response)
            self.keys.append(response.key)
            self.prompts.append(prompt)
        return served

    def not_held_keys(self, prompts: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """`prompts`, each one that the policy holds as a key (the case `avoid` leaves out) with tokens appended, and
        each one related by prefix to another row of the batch changed where they meet (rows are admitted while
        others run: a row's head, stored first, could be another row's prompt)."""
        out: list[tuple[int, ...]] = []
        for prompt in prompts:
            for _ in range(4 * MAX_PROMPT):
                related = next((p for p in out if p[: len(prompt)] == prompt or prompt[: len(p)] == p), None)
                if related is not None:
                    at = min(len(related), len(prompt)) - 1
                    prompt = prompt[:at] + ((prompt[at] + 1) % self.model.vocab,) + prompt[at + 1 :]
                elif prompt in self.policy.held:
                    prompt = prompt + (0,)
                else:
                    break
            out.append(prompt)
        return out

    @rule(data=st.data())
    def a_new_prompt(self, data):
        self.send([data.draw(self.tokens(), label="new prompt")], "a new prompt")

    @precondition(lambda self: self.prompts)
    @rule(data=st.data())
    def a_prompt_again(self, data):
        self.send([data.draw(st.sampled_from(self.prompts), label="again")], "a prompt again")

    @precondition(lambda self: self.keys and "a_stored_key" not in self.avoid)
    @rule(data=st.data())
    def a_stored_key(self, data):
        self.send([data.draw(st.sampled_from(self.keys), label="key")], "exactly a stored key (prompt + completion)")

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def a_prefix_of_a_stored_key(self, data):
        key = data.draw(st.sampled_from(self.keys), label="key")
        cut = data.draw(st.integers(1, max(1, len(key) - 1)), label="cut")
        self.send([key[:cut]], "a prefix of a stored key")

    @precondition(lambda self: self.keys)
    @rule(data=st.data(), chat=st.booleans())
    def an_extension_of_a_stored_key(self, data, chat):
        key = data.draw(st.sampled_from(self.keys), label="key")
        turn = data.draw(self.tokens(1, 5), label="new turn")
        self.send([key + turn], "a chat continuation (key + a new turn)" if chat else "an extension")

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def a_stored_block_at_another_position(self, data):
        key = data.draw(st.sampled_from(self.keys), label="key")
        head = data.draw(self.tokens(1, 4), label="another head")
        self.send([head + key], "a stored block after another prefix")

    @precondition(lambda self: any(len(k) > 1 for k in self.keys))
    @rule(data=st.data())
    def a_stored_tail_at_the_start(self, data):
        """A stored key's tail as a new prompt: its tokens were cached at later positions (a position-blind key)."""
        key = data.draw(st.sampled_from([k for k in self.keys if len(k) > 1]), label="key")
        cut = data.draw(st.integers(1, len(key) - 1), label="cut")
        self.send([key[cut:]], "a stored key's tail at the start")

    @rule(data=st.data())
    def a_block_repeated(self, data):
        block = data.draw(self.tokens(2, 5), label="block")
        self.send([block + block], "a block repeated")

    @precondition(lambda self: self.prompts)
    @rule(data=st.data())
    def one_token_changed(self, data):
        prompt = data.draw(st.sampled_from(self.prompts), label="prompt")
        at = data.draw(st.integers(0, len(prompt) - 1), label="at")
        shift = data.draw(st.integers(1, self.model.vocab - 1), label="shift")
        self.send([prompt[:at] + ((prompt[at] + shift) % self.model.vocab,) + prompt[at + 1 :]], "one token changed")

    @rule(data=st.data())
    def crossing_the_window(self, data):
        window = self.model.window or 4
        self.send([data.draw(self.tokens(window + 1, 3 * window), label="long prompt")], "longer than the window")

    @precondition(lambda self: self.prompts)
    @rule(data=st.data())
    def a_batch_beside_uncached_prompts(self, data):
        held = data.draw(st.sampled_from(self.prompts), label="held")
        fresh = data.draw(st.lists(self.tokens(), min_size=1, max_size=2), label="uncached")
        rows = data.draw(st.permutations([held, *fresh]), label="order")
        self.send(rows, "a batch: a held prompt beside uncached ones")

    @precondition(lambda self: self.keys)
    @rule(data=st.data())
    def fill_until_evicted_then_ask_again(self, data):
        """New prompts until the oldest stored key has gone (CAPACITY + 1 of them), then that key's prompt."""
        oldest = self.prompts[0] if self.policy is None else next(iter(self.policy.held), self.prompts[0])
        for i in range(CAPACITY + 1):
            self.send([data.draw(self.tokens(2), label=f"filler {i}")], "a filler")
        self.send([oldest], "the evicted entry's tokens again")

    @precondition(lambda self: self.keys and "restart" in self.engine.supports and "persist" in self.engine.supports)
    @rule()
    def restart(self):
        """Only where something may outlive a restart (a process restart empties an in-memory cache by itself)."""
        self.log.append("restart()")
        self.engine.restart()
        if self.policy is not None and "persist" not in self.engine.supports:
            self.policy.clear()

    @precondition(lambda self: self.keys and 6 in self.checks and "fail" in self.engine.supports)
    @rule(data=st.data())
    def a_failing_request_then_good_ones(self, data):
        self.log.append("fail()")
        self.engine.fail()
        self.send([data.draw(st.sampled_from(self.prompts), label="after failure")], "after a failed request")
        self.send([data.draw(self.tokens(), label="new after failure")], "a new prompt after a failed request")

    @precondition(lambda self: self.keys and 5 in self.checks and "persist" in self.engine.supports)
    @rule(data=st.data(), damage=st.sampled_from((None, None, "truncated", "flipped byte", "another model")))
    def persist_restart_restore(self, data, damage):
        self.persist_case(data, damage)

    def persist_case(self, data, damage: str | None) -> None:
        """Persist, restart, restore (damaged as drawn), then a persisted key continued: the uncached response."""
        folder = self.folder / f"persist{len(self.log)}"
        keys = self.engine.persist(folder)
        if damage == "another model":
            other = type(self).factory()
            other.start(self.other_model or self.model, CAPACITY)
            try:
                shutil.rmtree(folder)
                other.serve([self.prompts[-1]], MAX_TOKENS)
                keys = other.persist(folder)
            finally:
                other.close()
        elif damage is not None and not any(p.is_file() for p in folder.rglob("*")):
            damage = None  # the engine wrote no file (an empty cache): nothing to damage
        elif damage is not None:
            files = sorted(p for p in folder.rglob("*") if p.is_file() and "adapter" not in p.relative_to(folder).parts)
            target = data.draw(st.sampled_from(files), label="damaged file")
            raw = bytearray(target.read_bytes())
            if damage == "truncated":
                raw = raw[: len(raw) // 2]
            else:
                at = data.draw(st.integers(0, len(raw) - 1), label="flipped at")
                raw[at] ^= 0x01 << data.draw(st.integers(0, 7), label="bit")
            target.write_bytes(bytes(raw))
        self.log.append(f"persist; restart; restore ({damage or 'intact'})")
        self.engine.restart()
        try:
            self.engine.restore(folder)
        except Exception as error:  # a clear refusal: what a damaged or foreign file must get
            assert damage is not None, f"rule 5: its own intact file refused: {error!r}\n  call: {self.call('')}"
            if self.policy is not None:
                self.policy.clear()
            return
        if self.policy is not None:
            self.policy.clear()
            if damage is None:
                for key in keys:
                    self.policy.store_key(key)
            else:
                self.policy = None  # a damaged file taken: what it reuses is unknown; what it serves is checked
        for key in keys[:2]:
            turn = data.draw(self.tokens(1, 4), label="continuation")
            self.send([key + turn], f"a persisted key continued after restore ({damage or 'intact'})")


def run_machine(
    factory: Callable[[], PrefixEngine],
    model: EngineModel,
    checks: Sequence[int],
    *,
    examples: int,
    steps: int = 6,
    other_model: EngineModel | None = None,
    avoid: Sequence[str] = (),
) -> list[int]:
    """The machine on `factory`'s engine over `model` with `checks`; returns the reuse counts it saw."""
    hits: list[int] = []
    machine = type(
        "PrefixCacheMachine",
        (PrefixCacheMachine,),
        dict(
            factory=staticmethod(factory),
            model=model,
            checks=frozenset(checks),
            other_model=other_model,
            hits=hits,
            avoid=frozenset(avoid),
        ),
    )
    chosen = settings(
        settings.default,
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # a finding's repro is a script; shrinking engine runs is minutes
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    run_state_machine_as_test(machine, settings=chosen)
    if 2 in checks:
        if not hits:
            import pytest

            pytest.skip("not applicable: the engine reports no reused count (rule 2 cannot see its cache)")
        assert any(hits), (
            f"rule 2: no request reused a cached token in {examples} runs: a cold-cache pass proves nothing"
        )
    return hits
