"""Progress on stderr: the map builder's stage bar and the package-wide policy."""

import numpy as np
import pytest

import pbsolver as pb
from pbsolver.molecule import maps
from pbsolver.progress import ENV, progress_bar


def _atoms(n=6, seed=3):
    rng = np.random.default_rng(seed)
    return pb.Atoms(rng.uniform(-2.5, 2.5, (n, 3)), rng.uniform(-1, 1, n), rng.uniform(1, 1.8, n))


def test_build_maps_names_each_stage_when_asked(capsys):
    m = maps.build_maps(_atoms(), spacing=0.6, margin=3.0, progress=True, surface="vdw",
                        ionic_strength=0.1)  # fmt: skip
    err = capsys.readouterr().err
    assert "maps of 6 atoms" in err and "4/4" in err
    for stage in ("surface", "ions", "Coulomb", "boundary"):
        assert stage in err
    quiet = maps.build_maps(_atoms(), spacing=0.6, margin=3.0, surface="vdw", ionic_strength=0.1)
    assert capsys.readouterr().err == ""  # small work, not a terminal: no bar
    np.testing.assert_array_equal(quiet.phi_coulomb, m.phi_coulomb)


def test_periodic_maps_have_no_boundary_stage(capsys):
    atoms = _atoms()
    atoms = pb.Atoms(atoms.positions + 6.0, atoms.charges, atoms.radii)
    maps.build_maps(atoms, boundary="periodic", box=(12.0, 12.0, 12.0), spacing=0.75,
                    surface="vdw", progress=True)  # fmt: skip
    err = capsys.readouterr().err
    assert "3/3" in err and "boundary" not in err


@pytest.mark.parametrize(("given", "env", "shown"), [(True, None, True), (False, None, False),
                                               (True, "0", True), (None, "0", False)])  # fmt: skip
def test_policy(monkeypatch, given, env, shown):
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    with progress_bar(3, given) as bar:
        assert bar.disable is not shown
