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
from ..base.errors import InputError
from ..optimize import operators as ops
from ..problem import Problem
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


def model_from_dict(data, source: str, problem: Problem) -> tuple[Surrogate, dict]:
    """Refit the model a file describes, for ``problem`` (which must be the network and devices it was fitted
    on)."""
    from ..model.devices import devices_hash
    from ..formats.network import network_hash

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"not a {FORMAT} file", source=source, field="format",
                         fix="Give a file written by `placement surrogate fit --out`")
    for key in ("spec", "placements", "targets", "network_hash", "devices_hash", "target"):
        if key not in data:
            raise InputError(f"the model file has no {key}", source=source, field=key)
    if data["network_hash"] != network_hash(problem.graph) or data["devices_hash"] != devices_hash(problem.devices):
        raise InputError(f"the model was fitted on {data.get('network')} / {data.get('devices')}, not on this run's "
                         f"{problem.graph.name} / {problem.devices.name}", source=source, field="network_hash",
                         fix="Score it on a run of the same network and device graph")
    try:
        spec = SurrogateSpec(**data["spec"]).check()
        X = np.asarray(data["placements"], dtype=np.int32).reshape(-1, problem.n_ops)
        y = np.asarray(data["targets"], dtype=float)
    except (TypeError, ValueError) as e:
        raise InputError(f"the model file is malformed ({e})", source=source, field="placements") from None
    if len(X) != len(y) or len(y) < 2 or X.min(initial=0) < 0 or X.max(initial=0) >= problem.n_devices:
        raise InputError("the model file's placements and targets do not match this problem", source=source,
                         field="placements")
    return Surrogate(problem, spec).fit(X, y), data
