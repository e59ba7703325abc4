"""Local simulators of the services pytest-citations talks to, speaking real HTTP on 127.0.0.1.

Each module names the documented behaviour it reproduces. They are test code,
not part of the package; examples and benchmarks start them the same way.
"""
