"""Spark jobs over the pipeline's data sources."""
