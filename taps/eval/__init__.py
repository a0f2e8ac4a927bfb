"""Evaluation: side-by-side runs (runner), metrics, prompt suites, the bench and profile commands and the
`python -m taps` command line. It imports the engine; the engine never imports it."""
