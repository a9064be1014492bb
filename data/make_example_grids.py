"""Write ``data/example_grids.h5``: a few small input grids in the pbsolver HDF5 layout.

Run from the repository root::

    python data/make_example_grids.py [OUTPUT]

Grids (all charges off the nodes, so φ_c is finite everywhere):

* ``born`` — 25³, h = 0.5 Å: a +1 e ion of radius 3 Å, ε 1 inside, 78.54 outside (node map).
* ``kirkwood`` — 33³, h = 0.5 Å: a sphere of radius 5 Å, ε 2/78.54, +1 e 2.5 Å off centre
  (node map, harmonic face rule).
* ``dipole_faces`` — 29×27×25, h = 0.6 Å: two spheres with charges +1/−1, ε 4/80, face
  permittivities ``epsilon_x/_y/_z`` from the fraction of each grid edge inside the solute.
* ``salt_periodic`` — 20³, h = 0.8 Å, periodic: a charged sphere in 0.15 M salt (``kappa2``).

φ_c = Σ k q / (ε_c |r − r_i|) in kJ/mol/e with k = 1389.35457 kJ Å/(mol e²).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pbsolver as pb  # noqa: E402

K = 1389.35457


def coulomb(grid, charges, positions, eps_c):
    """φ_c of point charges in a homogeneous ε_c, on the grid's nodes."""
    x, y, z = grid.coordinates()
    phi = np.zeros(grid.shape)
    for q, (px, py, pz) in zip(charges, positions, strict=True):
        r = np.sqrt((x - px) ** 2 + (y - py) ** 2 + (z - pz) ** 2)
        phi += K * q / (eps_c * r)
    return phi


def inside(grid, centres, radii, shift=(0.0, 0.0, 0.0)):
    """Boolean map: node (shifted by ``shift`` Å) inside any sphere."""
    x, y, z = grid.coordinates()
    x, y, z = x + shift[0], y + shift[1], z + shift[2]
    mask = np.zeros(grid.shape, dtype=bool)
    for (cx, cy, cz), a in zip(centres, radii, strict=True):
        mask |= (x - cx) ** 2 + (y - cy) ** 2 + (z - cz) ** 2 < a * a
    return mask


def edge_faces(grid, centres, radii, eps_in, eps_out, samples=8):
    """Face permittivities from the fraction f of each edge inside: 1/(f/ε_in + (1−f)/ε_out)."""
    faces = []
    for axis in range(3):
        frac = np.zeros(grid.shape)
        for s in range(samples):
            shift = [0.0, 0.0, 0.0]
            shift[axis] = (s + 0.5) / samples * grid.spacing[axis]
            frac += inside(grid, centres, radii, shift)
        frac /= samples
        faces.append((1.0 / (frac / eps_in + (1.0 - frac) / eps_out)).astype(np.float32))
    return tuple(faces)


def centred_grid(n, h, offset=(0.0, 0.0, 0.0)):
    """A grid of n nodes a side (or 3 counts) with its centre at ``offset``."""
    shape = (n, n, n) if np.isscalar(n) else tuple(n)
    origin = [o - 0.5 * (m - 1) * h for o, m in zip(offset, shape, strict=True)]
    return pb.Grid(shape, spacing=h, origin=origin)


def build():
    """The example problems by name."""
    problems = {}

    g = centred_grid(25, 0.5)
    q_pos = [(0.11, -0.07, 0.05)]
    eps = np.where(inside(g, [(0, 0, 0)], [3.0]), 1.0, 78.54).astype(np.float32)
    problems["born"] = pb.Problem(g, eps, coulomb(g, [1.0], q_pos, 1.0), eps_cavity=1.0)

    g = centred_grid(33, 0.5, offset=(0.25, 0.25, 0.25))
    q_pos = [(0.0, 0.0, 2.5)]
    eps = np.where(inside(g, [(0, 0, 0)], [5.0]), 2.0, 78.54).astype(np.float32)
    problems["kirkwood"] = pb.Problem(
        g, eps, coulomb(g, [1.0], q_pos, 2.0), eps_cavity=2.0, face_rule="harmonic"
    )

    g = centred_grid((29, 27, 25), 0.6)
    centres, radii = [(-2.0, 0.3, 0.1), (2.1, -0.2, 0.2)], [2.5, 2.5]
    faces = edge_faces(g, centres, radii, 4.0, 80.0)
    problems["dipole_faces"] = pb.Problem(
        g,
        epsilon_faces=faces,
        phi_coulomb=coulomb(g, [1.0, -1.0], [(-2.0, 0.33, 0.07), (2.1, -0.23, 0.21)], 4.0),
        eps_cavity=4.0,
    )

    g = centred_grid(20, 0.8, offset=(0.4, 0.4, 0.4))
    solute = inside(g, [(0, 0, 0)], [3.0])
    ion_free = inside(g, [(0, 0, 0)], [3.0 + 2.0])  # Stern layer: ions stay 2 Å away
    eps_out, ionic_strength = 78.54, 0.15
    kappa2 = np.where(ion_free, 0.0, eps_out * ionic_strength / 3.04**2).astype(np.float32)
    eps = np.where(solute, 2.0, eps_out).astype(np.float32)
    phi_c = coulomb(g, [1.0], [(0.13, 0.05, -0.11)], 2.0)
    problems["salt_periodic"] = pb.Problem(
        g, eps, phi_c, eps_cavity=2.0, kappa2=kappa2, boundary="periodic"
    )
    return problems


def main(argv=None):
    """Write the example file (default ``data/example_grids.h5`` next to this script)."""
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0]) if argv else Path(__file__).resolve().parent / "example_grids.h5"
    from pbsolver.io.hdf5 import write_hdf5

    write_hdf5(out, build())
    print(f"{out}: {out.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
