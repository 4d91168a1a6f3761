"""pytest plugin for python3-etcd3's suite (compat/etcd TestPythonEtcd3Suite).

The suite's Hypothesis tests take the function-scoped `etcd` fixture, which
Hypothesis 5 and later refuse by a health check before running a single
example. This profile suppresses that one check. It is loaded before the
suite's module, whose own profile (deadline=None) is then built on it, so
every other setting is the suite's.
"""
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dkvcompat", suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("dkvcompat")
