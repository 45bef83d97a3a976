"""docker-compose.yml against the compose specification's JSON schema, plus what the deployment
needs: a healthy PostgreSQL before the web and the workers, a web-only web, GPU workers that
scale, user namespaces for bubblewrap without --privileged, no host-root mounts. No Docker engine
runs in CI; docs/deployment.md says what was verified on a real one and what was not."""

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gradlab.config import PROJECT_ROOT
from tests.conftest import FIXTURES

COMPOSE = PROJECT_ROOT / "docker-compose.yml"
# vendored from compose-spec/compose-spec schema/compose-spec.json (Apache-2.0, see
# tests/fixtures/compose-spec.LICENSE), as shipped in check-jsonschema 0.39.0's vendor folder
SCHEMA = FIXTURES / "compose-spec.json"


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_is_valid_against_the_compose_spec_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    errors = sorted(validator_class(schema).iter_errors(_compose()), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_schema_rejects_a_broken_compose_file() -> None:
    """The schema really checks something: a misspelt key and a bad condition fail."""
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    broken = _compose()
    broken["services"]["web"]["depends_on"]["postgres"]["condition"] = "service_ready"
    broken["services"]["worker"]["deploy"]["resourcez"] = {}
    assert len(list(validator.iter_errors(broken))) >= 2


def test_postgres_is_healthchecked_and_keeps_its_data_in_a_named_volume() -> None:
    compose = _compose()
    postgres = compose["services"]["postgres"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    (volume,) = postgres["volumes"]
    name, target = volume.split(":")[:2]
    assert name in compose["volumes"] and target == "/var/lib/postgresql/data"


def test_web_waits_for_healthy_postgres_and_runs_no_worker() -> None:
    web = _compose()["services"]["web"]
    assert web["depends_on"]["postgres"]["condition"] == "service_healthy"
    command = web["command"]
    assert command[0] == "serve" and command[command.index("--workers") + 1] == "0"
    assert "/healthz" in " ".join(web["healthcheck"]["test"])


def test_worker_reserves_a_gpu_and_can_scale() -> None:
    worker = _compose()["services"]["worker"]
    assert worker["command"] == ["worker"]
    assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert device.get("count") in (1, "all") or device.get("device_ids")
    # --scale worker=N: nothing that must be unique per container
    assert "container_name" not in worker and "ports" not in worker
    assert worker["deploy"].get("replicas") is None


def test_every_setting_comes_from_gradlab_environment_variables() -> None:
    services = _compose()["services"]
    for name in ("web", "worker"):
        env = services[name]["environment"]
        assert env["GRADLAB_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert "@postgres:5432/" in env["GRADLAB_DATABASE_URL"]
        assert all(key.startswith("GRADLAB_") for key in env)


def test_sandbox_needs_no_privileged_container_and_no_host_root_mounts() -> None:
    services = _compose()["services"]
    for name, service in services.items():
        assert not service.get("privileged"), name
        assert not service.get("cap_add"), name
        assert service.get("pid") != "host" and service.get("network_mode") != "host", name
        for volume in service.get("volumes", []):
            source = (volume if isinstance(volume, str) else volume.get("source", "")).split(":")[0]
            assert source != "/" and not source.startswith(("/var/run/docker", "/proc", "/sys"))
    worker = services["worker"]
    assert {"seccomp=unconfined", "apparmor=unconfined"} <= set(worker["security_opt"])


def test_dockerfile_installs_the_sandbox_and_builds_cpu_and_cuda_images() -> None:
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    assert "bubblewrap" in dockerfile and "libseccomp2" in dockerfile
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in dockerfile
    assert '".[postgres]"' in dockerfile
    args = _compose()["services"]
    assert args["web"]["build"]["args"]["TORCH_INDEX_URL"].endswith("/cpu")
    assert "/cu" in args["worker"]["build"]["args"]["TORCH_INDEX_URL"]
    # every path the image copies exists in the repository
    for line in dockerfile.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (PROJECT_ROOT / source).exists(), source


def test_deployment_doc_exists_and_names_the_userns_requirements() -> None:
    doc = (PROJECT_ROOT / "docs" / "deployment.md").read_text()
    for needle in (
        "seccomp=unconfined",
        "unprivileged_userns_clone",
        "cgroup",
        "nvidia",
        "Verified",
    ):
        assert needle in doc, needle
    assert Path(PROJECT_ROOT / "docker-compose.yml").exists()
