"""Whole-store operations: storage upkeep, stats, backup, holders, repair, recover."""
