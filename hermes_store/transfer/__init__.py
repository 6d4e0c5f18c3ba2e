"""Moving sessions in and out: readers, exporters, parsers and the loader."""
