"""phaselog benchmarks: ``python -m bench`` (or ``make bench``). See bench/README.md.

Every figure is printed beside a baseline measured in the same run, with subject and baseline
rounds interleaved, because the machines are shared and noisy: read the ratios, not the
absolute times. Tests never time anything; ``tests/test_bench_smoke.py`` only runs ``--quick``.
"""
