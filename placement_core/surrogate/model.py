"""A learned cost model of a placement's objective (the dissertation's makespan predictor, Ch. 5): gradient
boosting (scikit-learn) over :mod:`.features`, fitted to simulated or measured samples, judged by Kendall τ
(§5.6: what a search needs is the order), Pearson r and MAPE on placements it has not seen.

A model file (``placement-surrogate/1``) holds the recipe and the training set, not a pickled estimator:
loading refits it (deterministic, seconds), so a model file can never carry code, and it does not depend
on the scikit-learn version that wrote it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..analysis.stats import kendall_tau, mape, pearson_r
from ..base.errors import InputError, require_mapping, require_name, require_number, shown
from ..optimize import operators as ops
from ..problem import Problem, ProblemSpec
from .features import ENCODINGS, Featurizer

FORMAT = "placement-surrogate/1"
LEARNERS = ("hist-gbr", "gbr")  # histogram gradient boosting (fast), the dissertation's GradientBoostingRegressor


def require_sklearn():
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise InputError("scikit-learn is not installed", field="surrogate",
                         fix='Install the learn extra: .venv/bin/pip install -e ".[learn]"') from None


@dataclass(frozen=True)
class SurrogateSpec:
    """How a surrogate is built: its features, learner and seed (the same spec and data, the same model)."""

    encoding: str = "features"
    simulated: bool = False  # the simulated batch time as a feature (for measured targets only)
    learner: str = "hist-gbr"
    seed: int = 0

    def check(self) -> "SurrogateSpec":
        if self.encoding not in ENCODINGS:
            raise InputError(f"unknown encoding {self.encoding!r}", field="--encoding",
                             fix="Use one of: " + ", ".join(ENCODINGS))
        if self.learner not in LEARNERS:
            raise InputError(f"unknown learner {self.learner!r}", field="--learner",
                             fix="Use one of: " + ", ".join(LEARNERS))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= 2**32 - 1:
            raise InputError(f"the seed must be an integer from 0 to {2**32 - 1}, got {self.seed!r}", field="--seed",
                             fix="scikit-learn's seeds stop at 2^32 - 1")
        return self


class Surrogate:
    """Predicts the objective of placements of one problem; fitted on log(objective) (times are positive and
    vary by orders of magnitude once memory penalties come in)."""

    def __init__(self, problem: Problem, spec: SurrogateSpec | None = None):
        require_sklearn()
        self.problem, self.spec = problem, (spec or SurrogateSpec()).check()
        self.featurize = Featurizer(problem, self.spec.encoding, self.spec.simulated)
        self.model = None
        self.n_train = 0

    def _learner(self):
        if self.spec.learner == "gbr":
            from sklearn.ensemble import GradientBoostingRegressor
            return GradientBoostingRegressor(n_estimators=400, max_depth=4, learning_rate=0.05, subsample=0.8,
                                             random_state=self.spec.seed)
        from sklearn.ensemble import HistGradientBoostingRegressor
        return HistGradientBoostingRegressor(max_iter=300, learning_rate=0.08, random_state=self.spec.seed)

    def fit(self, placements, targets) -> "Surrogate":
        y = np.asarray(targets, dtype=float)
        if len(y) < 2:
            raise InputError(f"a surrogate needs at least 2 samples, got {len(y)}", field="samples")
        if not (np.isfinite(y).all() and (y > 0).all()):
            raise InputError("every target must be a positive, finite time", field="samples")
        with _one_thread():
            self.model = self._learner().fit(self.featurize(placements), np.log(y))
        self.n_train = len(y)
        return self

    def predict(self, placements) -> np.ndarray:
        if self.model is None:
            raise InputError("the surrogate has not been fitted", field="surrogate")
        with _one_thread():
            return np.exp(self.model.predict(self.featurize(placements)))


def _one_thread():
    """scikit-learn's OpenMP threads spin while they wait: on a busy 2-core machine two of them made a fit 10x
    slower than one. One thread also makes every fit the same, whatever the machine."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(1)


def metrics(truth, predicted) -> dict:
    """Kendall τ-b, Pearson r and MAPE (%) of ``predicted`` against ``truth``."""
    t, p = np.asarray(truth, float), np.asarray(predicted, float)
    return {"kendall_tau": _num(kendall_tau(t, p)), "pearson_r": _num(pearson_r(t, p)), "mape": _num(mape(p, t)),
            "n": int(len(t))}


def _num(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def sample_placements(problem: Problem, seeds, n: int, rng: np.random.Generator, exclude=()) -> np.ndarray:
    """``n`` distinct placements to learn from: a quarter uniformly random, a quarter random contiguous zones,
    half mutations of the ``seeds`` (a run's best placements; point mutation at a log-uniform rate between
    0.5 % and 30 % of the ops, a zone mutation in a third of them) — a search spends its time near good
    placements, so that is where the model must rank well. ``exclude``: placements not to draw (a test set
    disjoint from a training set)."""
    d, m = problem.n_devices, problem.n_ops
    seeds = np.asarray(seeds, dtype=np.int32).reshape(-1, m)
    seen = {np.ascontiguousarray(x, dtype=np.int32).tobytes() for x in exclude}
    out: list[np.ndarray] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise InputError(f"could not draw {n} distinct placements (this problem has too few)", field="--samples",
                             fix="Ask for fewer samples")
        r = rng.random() if len(seeds) else rng.random() / 2  # no seeds: half random, half zones
        if r < 0.25:
            x = rng.integers(0, d, m, dtype=np.int32)
        elif r < 0.5:
            x = np.zeros(m, dtype=np.int32)
            cuts = np.sort(rng.choice(np.arange(1, m), size=min(int(rng.integers(1, 12)), m - 1), replace=False)) \
                if m > 1 else np.array([], int)
            start = 0
            for c in list(cuts) + [m]:
                x[start:c] = rng.integers(0, d)
                start = c
        else:
            x = seeds[int(rng.integers(len(seeds)))]
            x = ops.point_mutation(rng, x, float(np.exp(rng.uniform(np.log(0.005), np.log(0.3)))), d)
            if rng.random() < 1 / 3:
                x = ops.zone_mutation(rng, x, d)
        key = x.astype(np.int32).tobytes()
        if key not in seen:
            seen.add(key)
            out.append(x.astype(np.int32))
    return np.array(out, dtype=np.int32).reshape(-1, m)


def curve_sizes(n_train: int) -> list[int]:
    """50, 100, 250, 500, 1,000, 2,500, 5,000, ... below ``n_train``, then ``n_train`` itself."""
    sizes, s, steps = [], 50, (2, 2.5, 2)
    while s < n_train:
        sizes.append(s)
        s = int(round(s * steps[len(sizes) % 3 - 1]))
    return sizes + [n_train]


def learning_curve(problem: Problem, spec: SurrogateSpec, X, y, X_test, y_test, sizes=None) -> list[dict]:
    """τ, r and MAPE on the test set of a model fitted on the first ``s`` training samples, per size."""
    X, y = np.asarray(X), np.asarray(y, float)
    out = []
    for s in sizes or curve_sizes(len(y)):
        model = Surrogate(problem, spec).fit(X[:s], y[:s])
        out.append({"n_train": int(s), **metrics(y_test, model.predict(X_test))})
    return out


def cross_validate(problem: Problem, spec: SurrogateSpec, X, y, folds: int = 5) -> dict:
    """k-fold (dissertation §5.6): every sample predicted once by a model that did not see it."""
    X, y = np.asarray(X), np.asarray(y, float)
    k = min(int(folds), len(y))
    if k < 2:
        raise InputError(f"cross-validation needs at least 2 samples, got {len(y)}", field="samples")
    order = np.random.default_rng(spec.seed).permutation(len(y))
    pred = np.empty(len(y))
    for part in np.array_split(order, k):
        train = np.setdiff1d(order, part)
        pred[part] = Surrogate(problem, spec).fit(X[train], y[train]).predict(X[part])
    return {**metrics(y, pred), "folds": k}


# -- the model file -------------------------------------------------------------------------------------

def model_to_dict(problem: Problem, spec: SurrogateSpec, X, y, *, target: str, run_id: int | None,
                  validation: dict | None = None) -> dict:
    from ..model.devices import devices_hash
    from ..formats.network import network_hash

    return {"format": FORMAT, "target": target, "run": run_id, "network": problem.graph.name,
            "network_hash": network_hash(problem.graph), "devices": problem.devices.name,
            "devices_hash": devices_hash(problem.devices), "problem": problem.spec.to_dict(), "spec": asdict(spec),
            "validation": validation, "placements": np.asarray(X, dtype=np.int32).tolist(),
            "targets": [float(v) for v in y]}


MAX_SEED = 2**32 - 1  # scikit-learn's random_state stops here
MAX_SAMPLES = 1_000_000  # placements in a model file (the fit's --samples)
MAX_GENES_IN_FILE = 50_000_000  # placements x ops: what a model file may make this process hold
_FIELDS = {"format", "target", "run", "network", "network_hash", "devices", "devices_hash", "problem", "spec",
           "validation", "placements", "targets"}
_VALIDATION = {"kendall_tau", "pearson_r", "mape", "n", "folds"}


def check_sample_count(n: int, problem: Problem, option: str) -> None:
    """``n`` placements of ``problem`` fit in memory (a model, a held-out set)."""
    if n > MAX_SAMPLES or n * problem.n_ops > MAX_GENES_IN_FILE:
        most = min(MAX_SAMPLES, MAX_GENES_IN_FILE // problem.n_ops)
        raise InputError(f"{n:,} placements of {problem.n_ops:,} ops is more than a surrogate holds", field=option,
                         fix=f"Ask for at most {most:,} for this network")


def model_from_dict(data, source: str, problem: Problem) -> tuple[Surrogate, dict]:
    """Refit the model a file describes, for ``problem`` (which must be the network and devices it was fitted
    on). Every field is checked first, with its bounds, and named when it is wrong."""
    from ..model.devices import devices_hash
    from ..formats.network import network_hash

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"not a {FORMAT} file", source=source, field="format",
                         fix="Give a file written by `placement surrogate fit --out`")
    unknown = sorted(str(k) for k in set(data) - _FIELDS)
    if unknown:
        raise InputError(f"unknown field {unknown[0][:40]!r}", source=source, field=unknown[0][:40],
                         fix="Allowed: " + ", ".join(sorted(_FIELDS)))
    for key in ("spec", "placements", "targets", "network_hash", "devices_hash", "target"):
        if key not in data:
            raise InputError(f"the model file has no {key}", source=source, field=key)
    for key in ("network", "devices"):
        if key in data:
            require_name(data[key], source=source, field=key)
    for key in ("network_hash", "devices_hash"):
        h = data[key]
        if not (isinstance(h, str) and len(h) == 64 and all(c in "0123456789abcdef" for c in h)):
            raise InputError("expected a SHA-256 digest (64 hex digits)", source=source, field=key,
                             fix="Give a file written by `placement surrogate fit --out`")
    if data["network_hash"] != network_hash(problem.graph) or data["devices_hash"] != devices_hash(problem.devices):
        raise InputError(f"the model was fitted on {shown(data.get('network'), 80)} / {shown(data.get('devices'), 80)}, "
                         f"not on this run's {problem.graph.name} / {problem.devices.name}", source=source,
                         field="network_hash", fix="Score it on a run of the same network and device graph")
    if data["target"] not in ("simulated", "measured"):
        raise InputError(f"unknown target {shown(data['target'], 40)}", source=source, field="target",
                         fix="Use simulated or measured")
    run = data.get("run")
    if run is not None and (isinstance(run, bool) or not isinstance(run, int) or not 1 <= run <= 2**63 - 1):
        raise InputError(f"expected a run id or null, got {shown(run, 40)}", source=source, field="run")
    if data.get("problem") is not None:  # the recipe it was fitted under: its values too (built, not only parsed)
        try:
            ProblemSpec.from_dict(data["problem"], source=source).build(problem.graph, problem.devices,
                                                                         whole_batch=False)
        except InputError as e:
            raise InputError(e.problem, source=source, field=f"problem.{e.field}" if e.field else "problem",
                             fix=e.fix) from None
    spec = _spec_from(data["spec"], source)
    _check_validation(data.get("validation"), source)
    X = _placements(data["placements"], source, problem)
    y = _targets(data["targets"], source, len(X))
    return Surrogate(problem, spec).fit(X, y), data


def _spec_from(raw, source: str) -> SurrogateSpec:
    raw = require_mapping(raw, source=source, field="spec", what="the surrogate's recipe")
    allowed = {"encoding", "simulated", "learner", "seed"}
    for key in raw:
        if key not in allowed:
            raise InputError(f"unknown field {str(key)[:40]!r}", source=source, field=f"spec.{str(key)[:40]}",
                             fix="Allowed: " + ", ".join(sorted(allowed)))
    spec = SurrogateSpec()
    encoding, learner = raw.get("encoding", spec.encoding), raw.get("learner", spec.learner)
    simulated, seed = raw.get("simulated", spec.simulated), raw.get("seed", spec.seed)
    if encoding not in ENCODINGS:
        raise InputError(f"unknown encoding {shown(encoding, 40)}", source=source, field="spec.encoding",
                         fix="Use one of: " + ", ".join(ENCODINGS))
    if learner not in LEARNERS:
        raise InputError(f"unknown learner {shown(learner, 40)}", source=source, field="spec.learner",
                         fix="Use one of: " + ", ".join(LEARNERS))
    if not isinstance(simulated, bool):
        raise InputError(f"expected true or false, got {shown(simulated, 40)}", source=source, field="spec.simulated")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InputError(f"expected an integer from 0 to {MAX_SEED}, got {shown(seed, 40)}", source=source,
                         field="spec.seed", fix="scikit-learn's seeds stop at 2^32 - 1")
    return SurrogateSpec(encoding=encoding, simulated=simulated, learner=learner, seed=seed)


def _check_validation(raw, source: str) -> None:
    if raw is None:
        return
    raw = require_mapping(raw, source=source, field="validation", what="the cross-validated figures")
    for key, value in raw.items():
        at = f"validation.{str(key)[:40]}"
        if key not in _VALIDATION:
            raise InputError(f"unknown field {str(key)[:40]!r}", source=source, field=at,
                             fix="Allowed: " + ", ".join(sorted(_VALIDATION)))
        if value is not None:
            require_number(value, source=source, field=at, maximum=1e18)


def _placements(raw, source: str, problem: Problem) -> np.ndarray:
    n, d = problem.n_ops, problem.n_devices
    if not isinstance(raw, list) or len(raw) < 2:
        raise InputError("expected a list of at least 2 placements", source=source, field="placements")
    check_sample_count(len(raw), problem, "placements")
    for i, row in enumerate(raw):
        if not isinstance(row, list) or len(row) != n:
            got = f"{len(row)} entries" if isinstance(row, list) else _type(row)
            raise InputError(f"expected one device index per op ({n}), got {got}", source=source,
                             field=f"placements[{i}]", fix="Score the model on a run of the network it was fitted on")
        if not all(type(v) is int and 0 <= v < d for v in row):
            j, v = next((j, v) for j, v in enumerate(row) if not (type(v) is int and 0 <= v < d))
            raise InputError(f"expected a device index from 0 to {d - 1}, got {shown(v, 40)}", source=source,
                             field=f"placements[{i}][{j}]")
    return np.array(raw, dtype=np.int32).reshape(-1, n)


def _targets(raw, source: str, count: int) -> np.ndarray:
    if not isinstance(raw, list) or len(raw) != count:
        got = f"{len(raw)}" if isinstance(raw, list) else _type(raw)
        raise InputError(f"expected one target per placement ({count}), got {got}", source=source, field="targets")
    for i, v in enumerate(raw):
        require_number(v, source=source, field=f"targets[{i}]", positive=True, maximum=1e12, minimum=1e-300)
    return np.array(raw, dtype=float)


def _type(value) -> str:
    return {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
