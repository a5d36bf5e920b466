"""C12 on a real target (measured, never asserted): drafted decoding of SmolLM2-135M against mlx-lm's
`generate_step`, in both forms (quantised as the GGUF is, float32), per drafter and draft length k.

The drafters: prompt lookup (S17, transformers' rule), SmolLM2's own first layers under its head (an early-exit AR
drafter), and the AR drafters `make train` ships for SmolLM2 (plain and distilled, over a sub-vocabulary; run on a
held-out pydoc prompt, their domain). Each row gives tokens per target pass (measured), the i.i.d. acceptance they
imply, the cost ratio c of a drafted token to a one-token target step, Leviathan et al.'s predicted speedup
(which assumes a verify pass costs one step), the prediction from the measured parts (proposal, verify pass,
verify_chain), the measured wall-time speedup, and the verify pass's cost against a one-token step: the reason a
speedup can or cannot exist here. Everything of one k is timed interleaved (`time_side_by_side`), so the
machine's load hits all alike. `make bench` runs its quick grid (`GRIDS`; GRID=full for every form, prompt,
drafter and k: about 25 minutes on 2 cores), a line per case with the time left (docs/smollm2.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler

from ncm_verify.bench.drafting import (
    PART_CALLS,
    BenchDrafter,
    proposal,
    repeated,
    target_step,
    trained_row,
    verification,
)
from ncm_verify.bench.grids import add_grid_argument, apply_grid
from ncm_verify.bench.measure import time_side_by_side
from ncm_verify.environment import describe_environment
from ncm_verify.mlx_lm_real import smollm2
from ncm_verify.mlx_lm_real.smollm2_drafters import PromptLookupDrafter, make_early_exit
from ncm_verify.progress import Progress
from ncm_verify.protocol import DEFAULT_IMPLEMENTATION, load_implementation

PROMPTS = {
    "verse (repeats itself)": (
        "Twinkle, twinkle, little star,\nHow I wonder what you are!\nUp above the world so high,\n"
        "Like a diamond in the sky.\n\nTwinkle, twinkle, little star,\nHow I wonder what you are!\n"
        "Up above the world so high,\nLike a diamond in the sky.\n\nTwinkle, twinkle,"
    ),
    "code edit (chat)": (
        "<|im_start|>user\nRename the variable x to total in this code:\ndef add(a, b):\n    x = a + b\n"
        "    print(x)\n    return x\n<|im_end|>\n<|im_start|>assistant\n"
    ),
}
"""A prompt whose continuation repeats it (prompt lookup's best case) and a grounded edit (its intended use); and
`HELD_OUT_PROMPT`: held-out pydoc text, the trained drafters' domain."""
HELD_OUT_PROMPT = "pydoc (held out)"
TRAINED = (
    "smollm2_ar_data",
    "smollm2_ar_distilled",
    "smollm2_ncm_data",
    "smollm2_ncm_distilled",
    "smollm2_ncm_features",
)
"""The drafters `make train` ships for SmolLM2 (over a sub-vocabulary: AR llamas and NCM block drafters)."""


def held_out_prompt(characters: int = 400) -> str:
    """The start of the corpus's held-out part (never trained on), cut at a line end."""
    from ncm_verify.reference.drafting.text import HELD_OUT_FRACTION, load_text

    text = load_text()
    start = text.index("\n", int(len(text) * (1 - HELD_OUT_FRACTION))) + 1
    return text[start : text.rindex("\n", start, start + characters) + 1]


EARLY_EXIT_LAYERS = 8
TEMPERATURE = 0.3
GRIDS = {
    "quick": {
        "forms": ["float32"],
        "ks": [2],
        "tokens": 16,
        "repeats": 2,
        "prompts": ["verse (repeats itself)", HELD_OUT_PROMPT],
        "drafters": ["prompt lookup (S17)", "ar_distilled"],
    },
    "full": {"forms": list(smollm2.FORMS), "ks": [2, 4], "tokens": 24, "repeats": 3, "prompts": None, "drafters": None},
}
"""`--grid`'s defaults. quick (`make bench`): the float32 form at k = 2, prompt lookup on the repeating verse and the
distilled AR drafter on held-out text, beside the target alone (a few minutes on 2 cores); full: every form,
prompt, drafter and k (about 25 minutes). An option given on the command line wins over its grid's."""


def _as_drafter(model, max_block: int):
    """An NCM drafter proposes itself; a llama (over a sub-vocabulary) runs as an `ARDrafter` (blocked-sum rows)."""
    from ncm_verify.mlx_lm_real.text_drafters import ARDrafter

    return model if hasattr(model, "propose") else ARDrafter(model, max_block=max_block)


def make_drafters(target, ks: tuple[int, ...]) -> list[BenchDrafter]:
    from ncm_verify.reference.drafting.trained import SMOLLM2_DRAFTING, load_record, load_trained

    shipped = load_record(SMOLLM2_DRAFTING / "record.json")["models"] if SMOLLM2_DRAFTING.exists() else {}
    trained = [
        BenchDrafter(
            name.removeprefix("smollm2_"),
            _as_drafter(load_trained(name, SMOLLM2_DRAFTING), max(ks)),
            f"make train, {shipped[name]['parameters']} parameters",
        )
        for name in TRAINED
        if name in shipped
    ]
    return trained + [
        BenchDrafter("prompt lookup (S17)", PromptLookupDrafter(target.args.vocab_size, max_block=max(ks)), "no model"),
        BenchDrafter(
            f"early exit ({EARLY_EXIT_LAYERS} of 30 layers)",
            make_early_exit(target, EARLY_EXIT_LAYERS, max_block=max(ks)),
            "SmolLM2's first layers under its head, untrained",
        ),
    ]


def measure_form(
    impl,
    form: str,
    *,
    tokens: int,
    repeats: int,
    ks: tuple[int, ...],
    temperature: float,
    only_prompts: list[str] | None = None,
    only_drafters: list[str] | None = None,
    progress: Progress | None = None,
) -> list:
    """Rows of one target form, per prompt: every drafter at every k beside `generate_step` on that prompt.

    The early-exit drafter runs at the shortest k only: its acceptance (~0.05, untrained) makes longer blocks
    pure cost, and each of its generations takes several target generations' time on 2 cores.
    """
    model = smollm2.load_smollm2(form=form)
    target = model.model
    drafters = [d for d in make_drafters(target, ks) if only_drafters is None or d.name in only_drafters]
    sampler = make_sampler(temp=temperature)
    seeds = itertools.count(1)
    rows = []
    prompts = {**PROMPTS, HELD_OUT_PROMPT: held_out_prompt()}
    prompts = {name: text for name, text in prompts.items() if only_prompts is None or name in only_prompts}
    for (prompt_name, text), k in itertools.product(prompts.items(), ks):
        prompt = smollm2.encode(model, text)
        entries = [entry for entry in drafters if k == min(ks) or "early exit" not in entry.name]
        # the trained drafters know the pydoc text alone: they run on its held-out prompt
        entries = [e for e in entries if prompt_name == HELD_OUT_PROMPT or not e.note.startswith("make train")]
        case = f"{form}, {prompt_name}, k={k}: {', '.join(e.name for e in entries) or 'no drafter'}"
        if progress is not None:
            progress.start(case)

        def alone(prompt=prompt) -> None:
            for _ in generate_step(mx.array(prompt), target, max_tokens=tokens, sampler=sampler):
                pass

        def drafted(drafter, kept: list, k=k, prompt=prompt) -> Callable[[], None]:
            def run() -> None:
                key = mx.random.key(next(seeds))
                generation = impl.generate_drafted(
                    target, drafter, prompt, tokens, num_draft=k, key=key, temperature=temperature, kernels=impl
                )
                kept.append(generation)

            return run

        parts: dict[str, Callable[[], object]] = {
            "target step (1 token)": target_step(target, 1, prompt),
            f"target pass ({k + 1} tokens)": target_step(target, k + 1, prompt),
            "verify_chain": verification(impl, k, target.args.vocab_size),
        }
        for entry in entries:
            # a feature reader's proposal is timed on a placeholder state (its cost does not depend on the values)
            reads = getattr(entry.drafter, "reads_features", False)
            features = mx.zeros((1, target.args.hidden_size)) if reads else None
            parts[f"proposal ({k} tokens): {entry.name}"] = proposal(entry.drafter, k, features, prompt)
        kept: dict[str, list] = {entry.name: [] for entry in entries}
        contenders: dict[str, Callable[[], object]] = {"target alone": alone}
        contenders.update({entry.name: drafted(entry.drafter, kept[entry.name]) for entry in entries})
        # the calls interleaved with the generations, so that c and the speedups share the machine's load
        contenders.update({f"part: {name}": repeated(call, PART_CALLS) for name, call in parts.items()})
        times = time_side_by_side(contenders, repeats, budget_s=math.inf, burst=1)
        part_times = {name: statistics.median(times[f"part: {name}"]) / PART_CALLS for name in parts}
        step = part_times["target step (1 token)"]
        for entry in entries:
            row = trained_row(entry.name, k, tokens, (math.nan, math.nan), kept[entry.name][1:], times, part_times)
            del row["tokens_per_pass_exact"]  # no exact law of a 135M model: measured only
            row.update(form=form, prompt=prompt_name)
            row["verify_pass_over_step"] = part_times[f"target pass ({k + 1} tokens)"] / step
            row["speedup_predicted_with_prefill"] = with_prefill(row, tokens)
            rows.append(row)
        if progress is not None:
            progress.done(case)
    return rows


def case_count(forms: list[str], ks: list[int], prompts: list[str] | None) -> int:
    """How many (form, prompt, k) cases `measure_form` runs over `forms`."""
    return len(forms) * len(ks) * len(prompts if prompts is not None else [*PROMPTS, HELD_OUT_PROMPT])


def with_prefill(row: dict, tokens: int) -> float:
    """The parts' prediction with the prompt's prefill counted on both sides: the prefill estimated as the target's
    generation time less `tokens` one-token steps (noisy: a difference of two measured times)."""
    calls, k = row["per_call_s"], row["k"]
    alone = row["seconds"]["target alone"]["median_s"]
    prefill = alone - tokens * calls["target step (1 token)"]
    rounds = tokens / row["tokens_per_pass_measured"]["mean"]
    per_round = calls[f"proposal ({k} tokens)"] + calls[f"target pass ({k + 1} tokens)"] + calls["verify_chain"]
    return alone / (prefill + rounds * per_round)


def format_rows(rows: list[dict]) -> str:
    header = (
        f"{'form':9s} {'prompt':22s} {'drafter':28s} {'k':>2s} {'tok/pass':>8s} {'a':>5s} {'c':>5s} {'pass/step':>9s} "
        f"{'Leviathan':>9s} {'parts':>6s} {'+prefill':>8s} {'measured':>8s} {'ms/tok alone':>12s} {'drafted':>8s}"
    )
    lines = [header]
    for row in rows:
        lines.append(
            f"{row['form']:9s} {row['prompt']:22s} {row['drafter']:28s} {row['k']:2d} "
            f"{row['tokens_per_pass_measured']['mean']:8.2f} "
            f"{row['alpha']:5.2f} {row['c']:5.2f} {row['verify_pass_over_step']:9.2f} "
            f"{row['speedup_predicted']:9.2f} {row['speedup_predicted_from_parts']:6.2f} "
            f"{row['speedup_predicted_with_prefill']:8.2f} "
            f"{row['speedup_measured']:8.2f} {row['ms_per_token']['target alone']:12.1f} "
            f"{row['ms_per_token']['drafted']:8.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default=DEFAULT_IMPLEMENTATION)
    add_grid_argument(parser)
    parser.add_argument("--forms", nargs="+", choices=smollm2.FORMS, help="default: the grid's")
    parser.add_argument("--ks", nargs="+", type=int, help="draft lengths (default: the grid's)")
    parser.add_argument("--tokens", type=int, help="tokens a generation (default: the grid's)")
    parser.add_argument("--repeats", type=int, help="generations per prompt and contender after a warm-up")
    parser.add_argument("--temperature", type=float, default=TEMPERATURE)
    parser.add_argument("--prompts", nargs="+", help=f"only these prompts (of {[*PROMPTS, HELD_OUT_PROMPT]})")
    parser.add_argument("--drafters", nargs="+", help="only these drafters (by the table's name)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    apply_grid(args, GRIDS[args.grid])
    impl = load_implementation(args.impl)
    progress = Progress("bench.smollm2", case_count(args.forms, args.ks, args.prompts))
    rows = []
    for form in args.forms:
        rows += measure_form(
            impl,
            form,
            tokens=args.tokens,
            repeats=args.repeats,
            ks=tuple(args.ks),
            temperature=args.temperature,
            only_prompts=args.prompts,
            only_drafters=args.drafters,
            progress=progress,
        )
    print(f"C12 on SmolLM2-135M (temperature {args.temperature}, {args.tokens} tokens a generation; measured):")
    print(format_rows(rows))
    if args.out:
        result = {
            "rows": rows,
            "tokens": args.tokens,
            "temperature": args.temperature,
            "grid": args.grid,
            "prompts": args.prompts or list(PROMPTS) + [HELD_OUT_PROMPT],
            "environment": describe_environment(),
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
