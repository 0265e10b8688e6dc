"""Random sampling on the device: checks that a wrong generator or sampling kernel fails.

No reference can say which random numbers a device must draw, so these checks test what every
correct draw satisfies: the range (torch.multinomial returned -2^63 for every sample on
MPS in pytorch 92752, whose GPU is not named), categories of probability zero never drawn, draws without
replacement distinct, and the distribution within bounds that a correct generator leaves only
by chance: each statistic within SIGMAS standard errors of its expected value (about one false
alarm in 10^9 per statistic). Two draws from the same seed must be equal (each backend's
generator is seeded by torch.manual_seed) and two draws in a row must differ (a generator that
does not advance repeats itself). Sizes are past one threadgroup and odd (65537 elements),
as the rest of the suite's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ._device import dtype_supported, synchronize
from ._parity import _classify, _short
from ._reports import REPEATS, repeat_note

SECTION = "sampling"
SIGMAS = 6.0
N = 65537  # draws of each check: odd, past one threadgroup
FLOATS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Wrong(Exception):
    """A check's verdict: what a correct draw would not do."""


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise Wrong(message)


def _within(name: str, got: float, want: float, stderr: float) -> None:
    """`got` within SIGMAS standard errors of `want` (plus the float's own rounding)."""
    bound = SIGMAS * stderr + 1e-3 * abs(want) + 1e-6
    _need(abs(got - want) <= bound, f"{name} {got:.6g}, expected {want:.6g} +- {bound:.3g}")


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu")


def _finite(x: torch.Tensor) -> None:
    bad = int((~torch.isfinite(x.double())).sum())
    _need(bad == 0, f"{bad} of {x.numel()} values are NaN or infinite")


def _moments(x: torch.Tensor, mean: float, std: float, name: str) -> None:
    """Mean and variance of `x` against a distribution of `mean` and `std`."""
    d = x.double().flatten()
    n = d.numel()
    _within(f"{name} mean", float(d.mean()), mean, std / math.sqrt(n))
    # The sample variance's standard error; the fourth moment is 3 std^4 for a normal, 1.8
    # std^4 for a uniform: 3 bounds both.
    _within(f"{name} variance", float(d.var()), std**2, std**2 * math.sqrt(2.0 / (n - 1)) * 1.5)


def _counts(x: torch.Tensor, probs: torch.Tensor, name: str) -> None:
    """Each category's count within SIGMAS binomial standard errors of n * p."""
    n = x.numel()
    counts = torch.bincount(x.flatten().long(), minlength=probs.numel()).double()
    want = n * probs.double()
    stderr = (n * probs.double() * (1 - probs.double())).sqrt()
    bad = (counts - want).abs() > SIGMAS * stderr + 1
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise Wrong(
            f"{name}: {int(bad.sum())} categories drawn too often or too rarely (category {i}: "
            f"{int(counts[i])} of {n}, expected {float(want[i]):.1f} +- {SIGMAS * float(stderr[i]) + 1:.1f})"
        )


@dataclass(frozen=True)
class Check:
    op: str
    case: str
    dtype: str
    run: Callable[[str], None]  # raises Wrong with what is wrong
    deterministic: Callable[[str], torch.Tensor] | None = None  # a draw from manual_seed(0)


def _multinomial_probs(k: int) -> torch.Tensor:
    """`k` categories of unequal weights; every fifth one has weight zero."""
    w = torch.arange(1, k + 1, dtype=torch.float64) % 7 + 1
    w[::5] = 0
    return w / w.sum()


def _multinomial(dtype: torch.dtype, k: int, replacement: bool) -> Check:
    probs = _multinomial_probs(k)

    def draw(dev: str) -> torch.Tensor:
        p = probs.to(dtype)
        if replacement:
            return torch.multinomial(p.to(dev), N, replacement=True)
        rows = p.repeat(257, 1).to(dev)  # 257 rows: past a threadgroup of rows
        return torch.multinomial(rows, int((probs > 0).sum()) // 2, replacement=False)

    def run(dev: str) -> None:
        x = _host(draw(dev))
        synchronize(dev)
        _need(x.dtype == torch.int64, f"dtype {x.dtype}, expected torch.int64")
        low, high = int(x.min()), int(x.max())
        _need(low >= 0 and high < k, f"samples out of range: min {low}, max {high} (categories 0..{k - 1})")
        zero = probs == 0
        drawn_zero = int(zero[x.flatten()].sum())
        _need(drawn_zero == 0, f"{drawn_zero} samples of categories whose probability is zero")
        if replacement:
            _counts(x, probs.to(dtype).double() / probs.to(dtype).double().sum(), "counts")
        else:
            dup = int(sum(int(row.numel() - row.unique().numel()) for row in x))
            _need(dup == 0, f"{dup} repeated categories in draws without replacement")

    mode = "with replacement" if replacement else "without replacement, 257 rows"
    return Check("multinomial", f"{k} categories, {mode}", str(dtype).removeprefix("torch."), run, draw)


# One sample at a time, as a language model picks its next token: on MPS, multinomial(p, 1)
# takes a path of its own (exponential_ noise and an argmax) that many-sample draws never
# reach. The reports all draw one sample: pytorch 92752 and 98612 (torch.multinomial(p, 1)
# returned -2^63), 148949 (Categorical(logits).sample(), the same), 192577 (a zero-probability
# token now and then, from an exponential_ that returns -0.0). Each table is drawn REPEATS
# times, each draw a kernel launch of its own.
# pytorch 148949's 27 logits.
LOGITS_148949 = (
    -0.6194, 0.2150, 0.0741, -0.5155, -0.3574, 0.1880, 0.3493, 0.2933, 0.3222, 0.1351, -0.1676,
    0.2195, -0.2661, -0.1681, 0.0102, -0.2942, 0.1377, -0.3102, 0.0231, -0.3813, -0.8353,
    -0.0413, -0.2836, -0.0108, -0.6760, -0.0350, -0.6092,
)  # fmt: skip
VOCAB = 32000  # LLaMA's vocabulary (pytorch 98612's probabilities came from nanoGPT: 50257)


def _one_sample_tables(dtype: torch.dtype) -> list[tuple[str, torch.Tensor]]:
    """(name, probabilities in `dtype` on the CPU), each a 2-D table of rows."""
    gen = torch.Generator().manual_seed(92752)
    # Ten rows (pytorch 92752's probs0.txt has ten) of next-token probabilities, sharpened as
    # a low temperature does, so that most of the tail is exactly zero (pytorch 192577).
    logits = torch.randn(10, VOCAB, generator=gen, dtype=torch.float64) * 4.0
    logits[:, :16] += 120.0  # exp(-120) is below float32's smallest subnormal: an exact-zero tail
    return [
        # A commenter's row on pytorch 92752: two non-zero categories of six.
        ("92752", torch.tensor([[2.3634e-04, 1.2352e-05, 0.0, 0.0, 0.0, 0.0]]).to(dtype)),
        ("148949", torch.softmax(torch.tensor([LOGITS_148949], dtype=torch.float64), -1).to(dtype)),
        (f"10 x {VOCAB} sharpened", torch.softmax(logits, -1).to(dtype)),
    ]


def _check_one_draw(name: str, x: torch.Tensor, probs: torch.Tensor, i: int) -> None:
    where = f"table {name}, draw {i + 1} of {REPEATS}"
    _need(x.dtype == torch.int64, f"{where}: dtype {x.dtype}, expected torch.int64")
    k = probs.shape[-1]
    low, high = int(x.min()), int(x.max())
    _need(low >= 0 and high < k, f"{where}: sample out of range: {low if low < 0 else high} (categories 0..{k - 1})")
    rows = probs.reshape(-1, k)
    picked = rows[torch.arange(rows.shape[0]), x.reshape(-1)]
    zero = int((picked == 0).sum())
    _need(zero == 0, f"{where}: {zero} sample(s) of a category whose probability is zero")


def _one_sample_check(op: str, dtype: torch.dtype, sample: Callable[[torch.Tensor], torch.Tensor]) -> Check:
    tables = _one_sample_tables(dtype)

    def draw(dev: str) -> torch.Tensor:
        return torch.cat([sample(p.to(dev)).reshape(-1) for _, p in tables])

    def run(dev: str) -> None:
        for name, p in tables:
            on_dev = p.to(dev)
            draws = []
            for i in range(REPEATS):
                x = _host(sample(on_dev))
                _need(x.numel() == p.shape[0], f"table {name}: {x.numel()} samples for {p.shape[0]} rows")
                _check_one_draw(name, x, p, i)
                draws.append(x.reshape(-1))
            if p.shape[0] == 1:  # one distribution drawn REPEATS times: its counts too
                probs = p.double().flatten()
                _counts(torch.cat(draws), probs / probs.sum(), f"table {name}, {REPEATS} draws")
        synchronize(dev)

    case = (f"one sample from tables 92752 (1 x 6), 148949 (1 x 27), 10 x {VOCAB} with a zero "
            f"tail; {repeat_note()}")  # fmt: skip
    return Check(op, case, str(dtype).removeprefix("torch."), run, draw)


def _multinomial_one(p: torch.Tensor) -> torch.Tensor:
    return torch.multinomial(p, 1)


def _categorical_sample(p: torch.Tensor) -> torch.Tensor:
    # Categorical normalises probs and draws with multinomial(., 1, True); logits as in 148949.
    return torch.distributions.Categorical(logits=p.log(), validate_args=False).sample()


def _randint(dtype: torch.dtype) -> Check:
    low, high = -5, 12

    def draw(dev: str) -> torch.Tensor:
        return torch.randint(low, high, (N,), device=dev, dtype=dtype)

    def run(dev: str) -> None:
        x = _host(draw(dev))
        _need(x.dtype == dtype, f"dtype {x.dtype}, expected {dtype}")
        lo, hi = int(x.min()), int(x.max())
        _need(lo >= low and hi < high, f"values out of [{low}, {high}): min {lo}, max {hi}")
        k = high - low
        _counts(x - low, torch.full((k,), 1.0 / k, dtype=torch.float64), "counts")

    return Check("randint", f"{N} in [{low}, {high})", str(dtype).removeprefix("torch."), run, draw)


def _float_checks(dname: str, dtype: torch.dtype) -> Iterator[Check]:
    def rand(dev: str) -> torch.Tensor:
        return torch.rand(N, device=dev, dtype=dtype)

    def run_rand(dev: str) -> None:
        x = _host(rand(dev))
        _finite(x)
        lo, hi = float(x.min()), float(x.max())
        _need(lo >= 0 and hi < 1, f"values out of [0, 1): min {lo}, max {hi}")
        _moments(x, 0.5, math.sqrt(1 / 12), "rand")

    yield Check("rand", f"{N} in [0, 1)", dname, run_rand, rand)

    def randn(dev: str) -> torch.Tensor:
        return torch.randn(N, device=dev, dtype=dtype)

    def run_randn(dev: str) -> None:
        x = _host(randn(dev))
        _finite(x)
        _moments(x, 0.0, 1.0, "randn")
        tail = float((x.double().abs() > 3).double().mean())
        p = math.erfc(3 / math.sqrt(2))  # P(|z| > 3) = 0.0027
        _within("share beyond 3 sigma", tail, p, math.sqrt(p * (1 - p) / N))

    yield Check("randn", f"{N} standard normal", dname, run_randn, randn)

    def normal(dev: str) -> torch.Tensor:
        return torch.empty(N, device=dev, dtype=dtype).normal_(3.0, 2.0)

    def run_normal(dev: str) -> None:
        x = _host(normal(dev))
        _finite(x)
        _moments(x, 3.0, 2.0, "normal_(3, 2)")

    yield Check("normal_", f"{N}, mean 3, std 2", dname, run_normal, normal)

    def bernoulli(dev: str) -> torch.Tensor:
        return torch.bernoulli(torch.full((N,), 0.3, device=dev, dtype=dtype))

    def run_bernoulli(dev: str) -> None:
        x = _host(bernoulli(dev))
        values = set(x.unique().tolist())
        _need(values <= {0.0, 1.0}, f"values other than 0 and 1: {sorted(values)[:5]}")
        _within("bernoulli(0.3) mean", float(x.double().mean()), 0.3, math.sqrt(0.21 / N))

    yield Check("bernoulli", f"{N} with p 0.3", dname, run_bernoulli, bernoulli)


def checks(device: str) -> Iterator[Check]:
    for dname, dtype in FLOATS.items():
        if not dtype_supported(device, dtype)[0]:
            continue  # the parity group reports the dtype as unsupported, with why
        yield from _float_checks(dname, dtype)
        yield _multinomial(dtype, 5, True)
        if dtype == torch.float32:
            yield _multinomial(dtype, 1000, True)
            yield _multinomial(dtype, 1000, False)
        if dtype == torch.float32:
            # float32 only: torch's own CPU multinomial(p, 1) on a float16 table drew a
            # zero-probability category in about 1 of 1500 rows (2026-11-27, torch 2.13.0),
            # so a float16 row would fail on a correct device as often as on a wrong one.
            yield _one_sample_check("multinomial_one_sample", dtype, _multinomial_one)
            yield _one_sample_check("categorical_sample", dtype, _categorical_sample)
    for idtype in (torch.int32, torch.int64):
        yield _randint(idtype)


def _row(check: Check, what: str, status: str, detail: str = "", seconds: float = 0.0) -> dict[str, Any]:
    return {
        "op": f"sampling.{check.op}", "family": "sampling", "case": check.case,
        "dtype": check.dtype, "check": what, "status": status, "detail": detail,
        "seconds": round(seconds, 4),
    }  # fmt: skip


def _outcome(check: Check, what: str, fn: Callable[[], None]) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        fn()
    except Wrong as exc:
        return _row(check, what, "fail", str(exc), time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001  # the row says what raised
        return _row(check, what, _classify(exc), _short(exc), time.perf_counter() - t0)
    return _row(check, what, "pass", "", time.perf_counter() - t0)


def _repeat(check: Check, device: str) -> None:
    """Same seed, same draw; the next draw differs."""
    assert check.deterministic is not None
    torch.manual_seed(1234)
    a = _host(check.deterministic(device))
    torch.manual_seed(1234)
    b = _host(check.deterministic(device))
    c = _host(check.deterministic(device))
    same = torch.equal(a, b)
    _need(same, f"two draws after torch.manual_seed(1234) differ in {int((a != b).sum())} of {a.numel()} values")
    _need(not torch.equal(b, c), "two draws in a row are identical: the generator does not advance")


def run(device: str, stream: Any, echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every check's distribution row and its seed row; each written to `stream`."""
    rows = []
    for check in checks(device):
        placeholder = _row(check, "distribution", "error")
        if not stream.begin(SECTION, placeholder):
            continue  # an earlier attempt of this group began it (hung there)
        torch.manual_seed(0)
        for what, fn in (
            ("distribution", lambda: check.run(device)),
            ("seed", lambda: _repeat(check, device)),
        ):
            row = _outcome(check, what, fn)
            rows.append(row)
            stream.row(SECTION, row)
            if row["status"] not in ("pass", "skip"):
                echo(f"regress: sampling {row['op']} {row['dtype']} {what} [{row['case']}]: "
                     f"{row['status']} {row['detail']}")  # fmt: skip
    return rows
