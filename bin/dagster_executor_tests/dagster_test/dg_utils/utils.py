def scrub_tox_uv_project_environment() -> None:
    """Dagster's removes variables tox-uv sets; no tox runs these tests."""
