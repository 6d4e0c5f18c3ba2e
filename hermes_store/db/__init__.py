"""The database layer: connection policy, models, the schema catalog, migrations, derived DDL."""
