"""The reaction field inside OpenMM (PythonForce) and along an MDAnalysis trajectory."""

import numpy as np
import pytest

import pbsolver as pb

OPTIONS = dict(spacing=0.7, margin=3.0, skin=3.0, eps_in=1.0, surface="vdw", backend="cpu",
               rtol=1e-8)  # fmt: skip


def _peptide_system():
    app = pytest.importorskip("openmm.app")
    pdb = app.PDBFile(str(pb.data.path("peptide.pdb")))
    ff = app.ForceField("amber14-all.xml")
    system = ff.createSystem(pdb.topology, nonbondedMethod=app.NoCutoff, constraints=None)
    return app, pdb, system


def test_openmm_force_reports_the_calculators_energy_and_forces():
    openmm = pytest.importorskip("openmm")
    from pbsolver.openmm import ANGSTROM_PER_NM, ReactionFieldForce

    app, pdb, system = _peptide_system()
    rf = ReactionFieldForce.from_system(system, pdb.topology, pdb.positions, **OPTIONS)
    force = rf.openmm_force()
    force.setForceGroup(5)
    system.addForce(force)
    integrator = openmm.VerletIntegrator(0.0005)
    sim = app.Simulation(pdb.topology, system, integrator,
                         openmm.Platform.getPlatformByName("Reference"))  # fmt: skip
    sim.context.setPositions(pdb.positions)
    state = sim.context.getState(getEnergy=True, getForces=True, groups={5})
    energy = state.getPotentialEnergy().value_in_unit(openmm.unit.kilojoule_per_mole)
    forces = state.getForces(asNumpy=True).value_in_unit(
        openmm.unit.kilojoule_per_mole / openmm.unit.nanometer
    )
    # the same frame through a calculator of its own; the MD force samples φ_rf by cubic
    # convolution unless told otherwise (C¹ as atoms cross node planes)
    assert rf.calculator.interpolation == "cubic"
    atoms = pb.Atoms.from_openmm(system, pdb.positions, pdb.topology, radii="bondi")
    ref = pb.ReactionFieldCalculator(atoms, interpolation="cubic", **OPTIONS).compute()
    assert energy < 0 and energy == pytest.approx(ref.energy, rel=1e-7)
    np.testing.assert_allclose(forces, ref.forces * ANGSTROM_PER_NM, rtol=1e-5,
                               atol=1e-5 * np.abs(forces).max())  # fmt: skip
    sim.step(3)  # OpenMM integrates with it: one evaluation a step after the first
    assert rf.evaluations >= 4 and rf.regrids == 0
    assert np.isfinite(sim.context.getState(getEnergy=True).getPotentialEnergy()._value)


def test_openmm_force_refuses_what_it_cannot_do():
    pytest.importorskip("openmm")
    from pbsolver.openmm import ReactionFieldForce

    with pytest.raises(pb.InputError, match="ReactionFieldCalculator"):
        ReactionFieldForce(object())
    app, pdb, system = _peptide_system()
    with pytest.raises(pb.InputError, match="kJ/mol"):
        ReactionFieldForce.from_system(system, pdb.topology, pdb.positions, units="kcal/mol",
                                       **OPTIONS)  # fmt: skip


def test_mdanalysis_analysis_matches_the_calculator_frame_by_frame():
    mda = pytest.importorskip("MDAnalysis")
    from pbsolver.mdanalysis import ReactionFieldAnalysis

    u = mda.Universe(str(pb.data.path("peptide.pqr")), str(pb.data.path("peptide.dcd")))
    rf = ReactionFieldAnalysis(u.atoms, batch=3, **OPTIONS).run(stop=7, step=2)  # 4 frames
    assert rf.results.energies.shape == (4,) and rf.results.forces.shape == (4, len(u.atoms), 3)
    assert rf.results.converged.all() and np.isfinite(rf.results.energies).all()
    calc = pb.ReactionFieldCalculator(pb.Atoms.from_mdanalysis(u.atoms), **OPTIONS)
    for row, ts in enumerate(u.trajectory[0:7:2]):
        ref = calc.compute(u.atoms.positions.astype(np.float64))
        assert rf.results.energies[row] == pytest.approx(ref.energy, rel=1e-6), ts.frame
        np.testing.assert_allclose(rf.results.potentials[row], ref.potentials, rtol=1e-5,
                                   atol=1e-6 * np.abs(ref.potentials).max())  # fmt: skip
    assert len(set(np.round(rf.results.energies, 6))) == 4  # the frames differ
    with pytest.raises(pb.InputError, match="batch"):
        ReactionFieldAnalysis(u.atoms, batch=0)
