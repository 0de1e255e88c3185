"""``voice-agent deploy`` against real boto3 clients with botocore's ``Stubber``.

AWS itself can't run here, so each client answers from a Stubber, and every request still
goes through botocore's own parameter validation against the service model, exactly as
before a real call. A recorder on the clients' event hooks notes what was actually sent, so
``--dry-run`` is compared with what a run really requested.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from agent.deploy import (
    DeployError,
    DeploySpec,
    endpoint_config_request,
    explain,
    main,
    model_request,
    plan_deploy,
    suffixed,
    validate_calls,
)

REGION = "us-east-1"
ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/VoxtralSageMakerRole"
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/voxtral-realtime:1"
S3 = "s3://my-bucket/voxtral-mini-4b-realtime"
SUFFIX = "20260102-030405"
NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)

DEPLOY_ARGS = [
    "sagemaker",
    "--endpoint-name", "voxtral-realtime",
    "--image-uri", IMAGE,
    "--model-data-s3", S3,
    "--role-arn", ROLE,
    "--region", REGION,
    "--name-suffix", SUFFIX,
    "--vllm-option", "gpu-memory-utilization=0.85",
]  # fmt: skip


def arn(kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:{kind}/{name}"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Dummy credentials, no profile files, no instance metadata: nothing can reach AWS."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@dataclass
class StubbedAws:
    """Real clients, stubbed responses, and a log of (operation, params) as sent."""

    sagemaker: Any = field(default_factory=lambda: boto3.client("sagemaker", region_name=REGION))
    autoscaling: Any = field(
        default_factory=lambda: boto3.client("application-autoscaling", region_name=REGION)
    )
    sent: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sm = Stubber(self.sagemaker)
        self.aa = Stubber(self.autoscaling)
        for service, client in (
            ("sagemaker", self.sagemaker),
            ("application-autoscaling", self.autoscaling),
        ):
            client.meta.events.register("provide-client-params.*.*", self._recorder(service))

    def _recorder(self, service: str) -> Any:
        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            self.sent.append(
                {
                    "service": service,
                    "operation": model.name,
                    "params": json.loads(json.dumps(params)),
                }
            )

        return record

    def factory(self, service: str, region: str) -> Any:
        assert region == REGION
        return self.sagemaker if service == "sagemaker" else self.autoscaling

    def writes(self) -> list[dict[str, Any]]:
        return [c for c in self.sent if not c["operation"].startswith("Describe")]

    def endpoint_missing(self) -> None:
        self.sm.add_client_error(
            "describe_endpoint",
            service_error_code="ValidationException",
            service_message=f'Could not find endpoint "{arn("endpoint", "voxtral-realtime")}".',
            http_status_code=400,
            expected_params={"EndpointName": "voxtral-realtime"},
        )

    def endpoint(self, status: str, config: str) -> None:
        self.sm.add_response(
            "describe_endpoint",
            {
                "EndpointName": "voxtral-realtime",
                "EndpointArn": arn("endpoint", "voxtral-realtime"),
                "EndpointConfigName": config,
                "EndpointStatus": status,
                "CreationTime": NOW,
                "LastModifiedTime": NOW,
            },
            {"EndpointName": "voxtral-realtime"},
        )

    def endpoint_config(self, config: str, model: str) -> None:
        self.sm.add_response(
            "describe_endpoint_config",
            {
                "EndpointConfigName": config,
                "EndpointConfigArn": arn("endpoint-config", config),
                "ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": model}],
                "CreationTime": NOW,
            },
            {"EndpointConfigName": config},
        )

    def creates(self, spec: DeploySpec, *, update: bool) -> None:
        name = spec.model_name
        self.sm.add_response("create_model", {"ModelArn": arn("model", name)}, model_request(spec))
        self.sm.add_response(
            "create_endpoint_config",
            {"EndpointConfigArn": arn("endpoint-config", name)},
            endpoint_config_request(spec),
        )
        self.sm.add_response(
            "update_endpoint" if update else "create_endpoint",
            {"EndpointArn": arn("endpoint", "voxtral-realtime")},
            {"EndpointName": "voxtral-realtime", "EndpointConfigName": spec.config_name},
        )

    def verify(self) -> None:
        self.sm.assert_no_pending_responses()
        self.aa.assert_no_pending_responses()


@pytest.fixture
def aws() -> Iterator[StubbedAws]:
    stubbed = StubbedAws()
    with stubbed.sm, stubbed.aa:
        yield stubbed


def spec(**overrides: Any) -> DeploySpec:
    values: dict[str, Any] = {
        "endpoint_name": "voxtral-realtime",
        "image_uri": IMAGE,
        "model_data_s3": S3,
        "role_arn": ROLE,
        "region": REGION,
        "name_suffix": SUFFIX,
        "vllm_options": {"gpu-memory-utilization": "0.85"},
    }
    values.update(overrides)
    return DeploySpec(**values)


def test_create_path_then_dry_run_prints_the_same_requests(
    aws: StubbedAws, capsys: pytest.CaptureFixture[str]
) -> None:
    wanted = spec(autoscaling_min=1, autoscaling_max=3)
    aws.endpoint_missing()
    aws.creates(wanted, update=False)
    aws.endpoint("InService", wanted.config_name)  # the waiter's first poll
    aws.aa.add_response("register_scalable_target", {})
    aws.aa.add_response("put_scaling_policy", {"PolicyARN": "arn:aws:autoscaling:policy"})

    args = [*DEPLOY_ARGS, "--autoscaling-min", "1", "--autoscaling-max", "3"]
    assert main(args, client_factory=aws.factory) == 0
    aws.verify()
    out = capsys.readouterr().out
    assert "voice-agent transcribe --sagemaker-endpoint voxtral-realtime --region us-east-1" in out
    assert "VOICE_AGENT_STT__SAGEMAKER__ENDPOINT_NAME=voxtral-realtime" in out

    model = aws.writes()[0]
    assert model["operation"] == "CreateModel"
    container = model["params"]["PrimaryContainer"]
    assert container["ModelDataSource"]["S3DataSource"] == {
        "S3Uri": S3 + "/",
        "S3DataType": "S3Prefix",
        "CompressionType": "None",
    }
    assert container["Environment"] == {
        "SM_VLLM_SERVED_MODEL_NAME": "mistralai/Voxtral-Mini-4B-Realtime-2602",
        "SM_VLLM_MAX_MODEL_LEN": "45000",
        "SM_VLLM_MAX_NUM_SEQS": "4",
        "SM_VLLM_GPU_MEMORY_UTILIZATION": "0.85",
    }
    variant = aws.writes()[1]["params"]["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.g6.4xlarge"
    assert variant["ModelDataDownloadTimeoutInSeconds"] == 1200

    sent = aws.writes()
    assert [c["operation"] for c in sent] == [
        "CreateModel", "CreateEndpointConfig", "CreateEndpoint",
        "RegisterScalableTarget", "PutScalingPolicy",
    ]  # fmt: skip
    assert main([*args, "--dry-run"], client_factory=aws.factory) == 0
    assert json.loads(capsys.readouterr().out) == sent
    assert len(aws.writes()) == len(sent)  # the dry run called nothing


def test_update_path_replaces_config_and_removes_the_old_one(aws: StubbedAws) -> None:
    wanted = spec()
    old = "voxtral-realtime-20251201-000000"
    aws.endpoint("InService", old)
    aws.creates(wanted, update=True)
    aws.endpoint("InService", wanted.config_name)
    aws.endpoint_config(old, old)
    aws.sm.add_response("delete_endpoint_config", {}, {"EndpointConfigName": old})
    aws.sm.add_response("delete_model", {}, {"ModelName": old})

    assert main(DEPLOY_ARGS, client_factory=aws.factory) == 0
    aws.verify()
    assert [c["operation"] for c in aws.writes()] == [
        "CreateModel", "CreateEndpointConfig", "UpdateEndpoint",
        "DeleteEndpointConfig", "DeleteModel",
    ]  # fmt: skip


def test_no_wait_returns_after_the_requests(aws: StubbedAws) -> None:
    aws.endpoint_missing()
    aws.creates(spec(), update=False)
    assert main([*DEPLOY_ARGS, "--no-wait"], client_factory=aws.factory) == 0
    aws.verify()


def test_delete_path_removes_endpoint_config_models_and_scaling(aws: StubbedAws) -> None:
    config = "voxtral-realtime-20260102-030405"
    aws.endpoint("InService", config)
    aws.aa.add_client_error(
        "deregister_scalable_target",
        service_error_code="ObjectNotFoundException",
        service_message="No scalable target registered",
        http_status_code=400,
    )
    aws.endpoint_config(config, config)
    aws.sm.add_response("delete_endpoint", {}, {"EndpointName": "voxtral-realtime"})
    aws.sm.add_response("delete_endpoint_config", {}, {"EndpointConfigName": config})
    aws.sm.add_response("delete_model", {}, {"ModelName": config})

    args = ["delete", "--endpoint-name", "voxtral-realtime", "--region", REGION]
    assert main(args, client_factory=aws.factory) == 0
    aws.verify()


def test_deleting_a_missing_endpoint_says_so(
    aws: StubbedAws, capsys: pytest.CaptureFixture[str]
) -> None:
    aws.endpoint_missing()
    args = ["delete", "--endpoint-name", "voxtral-realtime", "--region", REGION]
    assert main(args, client_factory=aws.factory) == 2
    assert "no endpoint named 'voxtral-realtime'" in capsys.readouterr().err


def test_quota_error_is_explained_with_the_fix(
    aws: StubbedAws, capsys: pytest.CaptureFixture[str]
) -> None:
    wanted = spec()
    aws.endpoint_missing()
    aws.sm.add_response("create_model", {"ModelArn": arn("model", wanted.model_name)})
    aws.sm.add_response(
        "create_endpoint_config", {"EndpointConfigArn": arn("endpoint-config", wanted.config_name)}
    )
    aws.sm.add_client_error(
        "create_endpoint",
        service_error_code="ResourceLimitExceeded",
        service_message="The account-level service limit 'ml.g6.4xlarge for endpoint usage' "
        "is 0 Instances, with current utilization of 0 Instances",
        http_status_code=400,
    )
    assert main(DEPLOY_ARGS, client_factory=aws.factory) == 1
    err = capsys.readouterr().err
    assert "quota for ml.g6.4xlarge in us-east-1" in err
    assert "Service Quotas" in err


def test_role_error_says_how_to_create_the_role(
    aws: StubbedAws, capsys: pytest.CaptureFixture[str]
) -> None:
    aws.endpoint_missing()
    aws.sm.add_client_error(
        "create_model",
        service_error_code="ValidationException",
        service_message=f"Could not assume role {ROLE}. Please ensure that the role exists "
        "and allows principal 'sagemaker.amazonaws.com' to assume the role.",
        http_status_code=400,
    )
    assert main(DEPLOY_ARGS, client_factory=aws.factory) == 1
    err = capsys.readouterr().err
    assert "execution role was refused" in err and "aws iam create-role" in err


def test_missing_credentials_are_explained(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    args = ["delete", "--endpoint-name", "voxtral-realtime", "--region", REGION]
    assert main(args) == 1  # real clients: botocore fails before any network use
    assert "no AWS credentials found" in capsys.readouterr().err


def test_missing_region_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for a in DEPLOY_ARGS if a not in ("--region", REGION)]
    assert main([*args, "--dry-run"]) == 1
    assert "--region" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"role_arn": "VoxtralRole"}, "--role-arn"),
        ({"model_data_s3": "/local/weights"}, "--model-data-s3"),
        ({"endpoint_name": "bad_name!"}, "--endpoint-name"),
        ({"autoscaling_min": 2}, "--autoscaling-max"),
    ],
)
def test_bad_options_are_refused_before_any_call(override: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DeployError, match=fragment):
        spec(**override)


def test_planned_requests_validate_against_the_service_models() -> None:
    validate_calls(plan_deploy(spec(autoscaling_min=1, autoscaling_max=2), endpoint_exists=True))
    broken = plan_deploy(spec(instance_count=1), endpoint_exists=False)
    broken[0].params["PrimaryContainer"]["Image"] = 42
    with pytest.raises(DeployError, match="Image"):
        validate_calls(broken)


def test_names_fit_sagemaker_limits() -> None:
    name = suffixed("v" * 80, SUFFIX)
    assert len(name) == 63 and name.endswith("-" + SUFFIX)


def test_explain_unknown_client_error_names_operation() -> None:
    from botocore.exceptions import ClientError

    exc = ClientError(
        {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "CreateModel"
    )
    assert explain(exc, region=REGION) == "AWS refused CreateModel: ThrottlingException: slow down"
