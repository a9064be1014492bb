"""The molecule side: atoms and PQR files, atoms → maps (ε faces, κ̄², φ_c), energies."""
