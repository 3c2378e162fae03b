"""Test-wide setup: nothing is pinned. The fit adds its products without BLAS (one order
on every CPU), so a shipped certificate is refitted byte for byte wherever numpy runs its
AVX-512 paths of ``exp`` and ``log``; :mod:`reference_cpu` says where that is."""
