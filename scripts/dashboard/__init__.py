"""The Grafana dashboard's rows, one module per concern (`scripts/build_dashboard.py`)."""
