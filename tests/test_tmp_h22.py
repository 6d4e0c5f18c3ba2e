from tests.test_citus import scenario
def test_tmp(pg_store):
    import pprint; pprint.pprint(scenario(pg_store))
