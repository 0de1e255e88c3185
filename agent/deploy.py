"""``voice-agent deploy``: create, update or delete the Voxtral SageMaker endpoint (boto3).

``deploy sagemaker`` creates a model (the image from ``container/``, weights from an
uncompressed S3 prefix, vLLM settings as ``SM_VLLM_*`` variables), an endpoint config and
the endpoint, or, when the endpoint exists, points it at the new config with
``UpdateEndpoint`` (no downtime) and removes the old config and model once the update is in
service. New models and configs get a time suffix, so a deployment never edits what is
serving. ``deploy delete`` removes the endpoint, its config and its models.

The requests are built by pure functions (:func:`plan_deploy`), so ``--dry-run`` prints exactly
what a real run sends, and :class:`Deployer` takes ready boto3 clients, so tests drive it with
botocore's ``Stubber``. AWS errors are turned into plain words with the fix (:func:`explain`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from agent.stt.protocol import VOXTRAL_MODEL

DEFAULT_ENDPOINT = "voxtral-realtime"
DEFAULT_INSTANCE = "ml.g6.4xlarge"
VARIANT = "AllTraffic"
NAME_LIMIT = 63  # SageMaker resource names: 63 characters, letters, digits and hyphens
_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
_ROLE_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")


class DeployError(Exception):
    """A problem the user can fix; the message says how."""


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One AWS API request: ``service`` as boto3 names it, ``operation`` as AWS does."""

    service: str
    operation: str
    params: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"service": self.service, "operation": self.operation, "params": self.params}


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploySpec:
    """What to deploy; every field has a command-line option."""

    endpoint_name: str = DEFAULT_ENDPOINT
    image_uri: str
    model_data_s3: str
    role_arn: str
    region: str
    instance_type: str = DEFAULT_INSTANCE
    instance_count: int = 1
    data_download_timeout_s: int = 1200
    startup_health_timeout_s: int = 1200
    served_model_name: str = VOXTRAL_MODEL
    max_model_len: int = 45000
    max_num_seqs: int = 4
    vllm_options: dict[str, str] = field(default_factory=dict)
    autoscaling_min: int | None = None
    autoscaling_max: int | None = None
    autoscaling_target: float = 3.0
    name_suffix: str = ""

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.endpoint_name) or len(self.endpoint_name) > NAME_LIMIT:
            raise DeployError(
                f"--endpoint-name {self.endpoint_name!r} is not a valid SageMaker name: use up to "
                f"{NAME_LIMIT} letters, digits and hyphens, starting with a letter or digit"
            )
        if not self.model_data_s3.startswith("s3://") or len(self.model_data_s3) <= 5:
            raise DeployError(
                f"--model-data-s3 must be an S3 prefix like s3://bucket/voxtral/, "
                f"got {self.model_data_s3!r}"
            )
        if not _ROLE_RE.match(self.role_arn):
            raise DeployError(
                f"--role-arn must be an IAM role ARN like arn:aws:iam::123456789012:role/Name, "
                f"got {self.role_arn!r}; see 'Execution role' in container/README.md"
            )
        if (self.autoscaling_min is None) != (self.autoscaling_max is None):
            raise DeployError("give both --autoscaling-min and --autoscaling-max, or neither")
        if self.autoscaling_min is not None and self.autoscaling_max is not None:
            if not 1 <= self.autoscaling_min <= self.autoscaling_max:
                raise DeployError("autoscaling needs 1 <= --autoscaling-min <= --autoscaling-max")
        if self.instance_count < 1:
            raise DeployError("--instance-count must be at least 1")

    @property
    def s3_prefix(self) -> str:
        """The prefix with a trailing slash, so ``voxtral`` can't also match ``voxtral-old/``."""
        return self.model_data_s3 if self.model_data_s3.endswith("/") else self.model_data_s3 + "/"

    @property
    def model_name(self) -> str:
        return suffixed(self.endpoint_name, self.name_suffix)

    @property
    def config_name(self) -> str:
        return suffixed(self.endpoint_name, self.name_suffix)


def suffixed(base: str, suffix: str) -> str:
    """``base-suffix`` cut to SageMaker's name limit (the suffix is kept whole)."""
    room = NAME_LIMIT - len(suffix) - 1
    return f"{base[:room].rstrip('-')}-{suffix}"


def default_suffix() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def container_environment(spec: DeploySpec) -> dict[str, str]:
    """The variables ``sagemaker-entrypoint.sh`` turns into vLLM flags."""
    env = {
        "SM_VLLM_SERVED_MODEL_NAME": spec.served_model_name,
        "SM_VLLM_MAX_MODEL_LEN": str(spec.max_model_len),
        "SM_VLLM_MAX_NUM_SEQS": str(spec.max_num_seqs),
    }
    for key, value in spec.vllm_options.items():
        env["SM_VLLM_" + key.upper().replace("-", "_")] = value
    return env


def model_request(spec: DeploySpec) -> dict[str, Any]:
    return {
        "ModelName": spec.model_name,
        "ExecutionRoleArn": spec.role_arn,
        "PrimaryContainer": {
            "Image": spec.image_uri,
            "ModelDataSource": {
                "S3DataSource": {
                    "S3Uri": spec.s3_prefix,
                    "S3DataType": "S3Prefix",
                    "CompressionType": "None",
                }
            },
            "Environment": container_environment(spec),
        },
        "Tags": [{"Key": "voice-agent:endpoint", "Value": spec.endpoint_name}],
    }


def endpoint_config_request(spec: DeploySpec) -> dict[str, Any]:
    return {
        "EndpointConfigName": spec.config_name,
        "ProductionVariants": [
            {
                "VariantName": VARIANT,
                "ModelName": spec.model_name,
                "InstanceType": spec.instance_type,
                "InitialInstanceCount": spec.instance_count,
                "ModelDataDownloadTimeoutInSeconds": spec.data_download_timeout_s,
                "ContainerStartupHealthCheckTimeoutInSeconds": spec.startup_health_timeout_s,
            }
        ],
        "Tags": [{"Key": "voice-agent:endpoint", "Value": spec.endpoint_name}],
    }


def autoscaling_calls(spec: DeploySpec) -> list[ApiCall]:
    """Target tracking on concurrent streams per model copy (one stream = one request)."""
    if spec.autoscaling_min is None or spec.autoscaling_max is None:
        return []
    resource = f"endpoint/{spec.endpoint_name}/variant/{VARIANT}"
    dimension = "sagemaker:variant:DesiredInstanceCount"
    return [
        ApiCall(
            "application-autoscaling",
            "RegisterScalableTarget",
            {
                "ServiceNamespace": "sagemaker",
                "ResourceId": resource,
                "ScalableDimension": dimension,
                "MinCapacity": spec.autoscaling_min,
                "MaxCapacity": spec.autoscaling_max,
            },
        ),
        ApiCall(
            "application-autoscaling",
            "PutScalingPolicy",
            {
                "PolicyName": f"{spec.endpoint_name}-concurrent-streams",
                "ServiceNamespace": "sagemaker",
                "ResourceId": resource,
                "ScalableDimension": dimension,
                "PolicyType": "TargetTrackingScaling",
                "TargetTrackingScalingPolicyConfiguration": {
                    "TargetValue": spec.autoscaling_target,
                    "PredefinedMetricSpecification": {
                        "PredefinedMetricType": (
                            "SageMakerVariantConcurrentRequestsPerModelHighResolution"
                        )
                    },
                    "ScaleInCooldown": 600,
                    "ScaleOutCooldown": 120,
                },
            },
        ),
    ]


def plan_deploy(spec: DeploySpec, *, endpoint_exists: bool) -> list[ApiCall]:
    """Every write request of a deployment, in order (autoscaling after ``InService``)."""
    endpoint = {"EndpointName": spec.endpoint_name, "EndpointConfigName": spec.config_name}
    return [
        ApiCall("sagemaker", "CreateModel", model_request(spec)),
        ApiCall("sagemaker", "CreateEndpointConfig", endpoint_config_request(spec)),
        ApiCall("sagemaker", "UpdateEndpoint" if endpoint_exists else "CreateEndpoint", endpoint),
        *autoscaling_calls(spec),
    ]


def validate_calls(calls: Sequence[ApiCall]) -> None:
    """Check requests against botocore's service models (local data; no network)."""
    import botocore.session
    from botocore.exceptions import ParamValidationError
    from botocore.validate import ParamValidator

    session = botocore.session.get_session()
    validator = ParamValidator()
    for call in calls:
        shape = session.get_service_model(call.service).operation_model(call.operation).input_shape
        report = validator.validate(call.params, shape)
        if report.has_errors():
            raise DeployError(str(ParamValidationError(report=report.generate_report())))


def _method(operation: str) -> str:
    from botocore import xform_name

    return str(xform_name(operation))


# ----------------------------------------------------------------------------- running


class Deployer:
    """Runs deployments with the given boto3 clients; prints progress to ``out``."""

    def __init__(
        self,
        *,
        sagemaker: Any,
        autoscaling: Any | None = None,
        out: TextIO = sys.stdout,
        wait_delay_s: float = 30.0,
        wait_max_attempts: int = 120,
    ) -> None:
        self._sagemaker = sagemaker
        self._autoscaling = autoscaling
        self._out = out
        self._wait = {"Delay": wait_delay_s, "MaxAttempts": wait_max_attempts}

    def _call(self, call: ApiCall) -> dict[str, Any]:
        client = self._sagemaker if call.service == "sagemaker" else self._autoscaling
        if client is None:
            raise DeployError(f"no {call.service} client to run {call.operation}")
        print(f"→ {call.operation} {_subject(call)}", file=self._out)
        result: dict[str, Any] = getattr(client, _method(call.operation))(**call.params)
        return result

    def endpoint_config_of(self, endpoint_name: str) -> str | None:
        """The endpoint's current config, or None if there is no such endpoint."""
        from botocore.exceptions import ClientError

        try:
            described = self._sagemaker.describe_endpoint(EndpointName=endpoint_name)
        except ClientError as exc:
            if _is_missing_endpoint(exc):
                return None
            raise
        return str(described["EndpointConfigName"])

    def deploy(self, spec: DeploySpec, *, wait: bool = True) -> list[ApiCall]:
        """Create or update; returns the write requests it made."""
        if spec.autoscaling_min is not None and not wait:
            raise DeployError(
                "autoscaling is set up once the endpoint is InService: drop --no-wait"
            )
        previous_config = self.endpoint_config_of(spec.endpoint_name)
        calls = plan_deploy(spec, endpoint_exists=previous_config is not None)
        endpoint_calls = [c for c in calls if c.service == "sagemaker"]
        for call in endpoint_calls:
            self._call(call)
        if not wait:
            print(f"Not waiting: {spec.endpoint_name} is being deployed.", file=self._out)
            return endpoint_calls
        self.wait_in_service(spec.endpoint_name)
        for call in calls[len(endpoint_calls) :]:
            self._call(call)
        if previous_config is not None and previous_config != spec.config_name:
            self._delete_config_and_models(previous_config)
        return calls

    def wait_in_service(self, endpoint_name: str) -> None:
        from botocore.exceptions import WaiterError

        print(f"Waiting for {endpoint_name} to be InService (model load takes minutes)…",
              file=self._out)  # fmt: skip
        try:
            self._sagemaker.get_waiter("endpoint_in_service").wait(
                EndpointName=endpoint_name, WaiterConfig=self._wait
            )
        except WaiterError as exc:
            reason = exc.last_response.get("FailureReason") or exc.last_response.get(
                "EndpointStatus", "unknown"
            )
            raise DeployError(
                f"endpoint {endpoint_name} did not reach InService: {reason}. The container's "
                f"log is in CloudWatch, log group /aws/sagemaker/Endpoints/{endpoint_name}."
            ) from exc

    def delete(self, endpoint_name: str) -> None:
        """Remove the endpoint, its config, its models and its autoscaling target."""
        config = self.endpoint_config_of(endpoint_name)
        if config is None:
            raise DeployError(
                f"there is no endpoint named {endpoint_name!r} in this region: check "
                "--endpoint-name and --region (aws sagemaker list-endpoints --region REGION)"
            )
        if self._autoscaling is not None:
            self._deregister_autoscaling(endpoint_name)
        models = self._models_of(config)
        self._call(ApiCall("sagemaker", "DeleteEndpoint", {"EndpointName": endpoint_name}))
        self._call(ApiCall("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": config}))
        for model in models:
            self._call(ApiCall("sagemaker", "DeleteModel", {"ModelName": model}))

    def _models_of(self, config: str) -> list[str]:
        described = self._sagemaker.describe_endpoint_config(EndpointConfigName=config)
        return [v["ModelName"] for v in described["ProductionVariants"] if v.get("ModelName")]

    def _delete_config_and_models(self, config: str) -> None:
        models = self._models_of(config)
        self._call(ApiCall("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": config}))
        for model in models:
            self._call(ApiCall("sagemaker", "DeleteModel", {"ModelName": model}))

    def _deregister_autoscaling(self, endpoint_name: str) -> None:
        from botocore.exceptions import ClientError

        params = {
            "ServiceNamespace": "sagemaker",
            "ResourceId": f"endpoint/{endpoint_name}/variant/{VARIANT}",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        }
        try:
            self._call(ApiCall("application-autoscaling", "DeregisterScalableTarget", params))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ObjectNotFoundException":
                raise


def _subject(call: ApiCall) -> str:
    for key in ("ModelName", "EndpointConfigName", "EndpointName", "ResourceId"):
        if key in call.params:
            return str(call.params[key])
    return ""


def _is_missing_endpoint(exc: Any) -> bool:
    error = exc.response.get("Error", {})
    return error.get("Code") == "ValidationException" and "Could not find" in str(
        error.get("Message", "")
    )


# ----------------------------------------------------------------------------- errors


ROLE_HELP = (
    "SageMaker needs an execution role it can assume, with read access to the model's S3 "
    "prefix and to the image in ECR. Create one:\n"
    "  aws iam create-role --role-name VoxtralSageMakerRole --assume-role-policy-document "
    '\'{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":'
    '{"Service":"sagemaker.amazonaws.com"},"Action":"sts:AssumeRole"}]}\'\n'
    "  aws iam attach-role-policy --role-name VoxtralSageMakerRole "
    "--policy-arn arn:aws:iam::aws:policy/AmazonSageMakerFullAccess\n"
    "then pass --role-arn arn:aws:iam::<account>:role/VoxtralSageMakerRole "
    "(see container/README.md)."
)


def explain(exc: BaseException, *, region: str | None = None, instance_type: str = "") -> str:
    """An AWS failure in plain words, with what to do about it."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
    )

    if isinstance(exc, DeployError):
        return str(exc)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return (
            "no AWS credentials found. Run 'aws configure' (or 'aws sso login'), set "
            "AWS_PROFILE, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."
        )
    if isinstance(exc, NoRegionError):
        return "no AWS region given: pass --region (e.g. --region us-east-1) or set AWS_REGION."
    if isinstance(exc, EndpointConnectionError):
        return (
            f"cannot reach SageMaker in region {region!r}: check --region is a real region "
            "with SageMaker, and your network."
        )
    if not isinstance(exc, ClientError):
        return f"{type(exc).__name__}: {exc}"
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message", ""))
    operation = exc.operation_name
    if code == "ResourceLimitExceeded":
        return (
            f"your account's quota for {instance_type or 'this instance type'} in {region} is "
            f"too low ({message}). Request an increase in the Service Quotas console (service "
            f"'Amazon SageMaker', quota '{instance_type} for endpoint usage'), choose another "
            "--instance-type, or delete an endpoint that uses it."
        )
    lowered = message.lower()
    role_words = ("assume", "executionrolearn", "not valid", "does not exist")
    if "role" in lowered and any(word in lowered for word in role_words):
        return f"the execution role was refused: {message}\n{ROLE_HELP}"
    if code in ("UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException"):
        return (
            f"AWS does not recognise these credentials ({message}). Check AWS_PROFILE / your "
            f"access keys, and that region {region!r} is enabled for your account."
        )
    if code in ("ExpiredToken", "ExpiredTokenException"):
        return "your AWS session expired: log in again ('aws sso login' or fresh keys)."
    if code in ("AccessDeniedException", "AccessDenied"):
        return (
            f"your AWS identity may not call {operation} ({message}). Ask for the sagemaker:* "
            "and application-autoscaling:* permissions, plus iam:PassRole on the execution role."
        )
    if "already existing" in lowered or "already exists" in lowered:
        return (
            f"{operation} failed: {message}. A resource with that name exists: pass another "
            "--name-suffix, or remove the old deployment with 'voice-agent deploy delete'."
        )
    if "image" in lowered and ("ecr" in lowered or "does not exist" in lowered):
        return (
            f"SageMaker cannot use the image: {message}. Push it to ECR in region {region} "
            "(container/README.md, 'Build and push') and pass its URI with --image-uri."
        )
    return f"AWS refused {operation}: {code}: {message}"


# ----------------------------------------------------------------------------- command line


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent deploy", description="Deploy or delete the Voxtral SageMaker endpoint."
    )
    sub = parser.add_subparsers(dest="action", required=True)

    up = sub.add_parser("sagemaker", help="create or update the endpoint")
    up.add_argument("--endpoint-name", default=DEFAULT_ENDPOINT)
    up.add_argument("--image-uri", required=True, help="the container/ image in ECR")
    up.add_argument("--model-data-s3", required=True, help="s3://bucket/prefix/ (uncompressed)")
    up.add_argument("--role-arn", required=True, help="SageMaker execution role ARN")
    up.add_argument("--region", help="AWS region (default: AWS_REGION / your profile's)")
    up.add_argument("--instance-type", default=DEFAULT_INSTANCE)
    up.add_argument("--instance-count", type=int, default=1)
    up.add_argument("--data-download-timeout", type=int, default=1200, metavar="SECONDS")
    up.add_argument("--startup-health-timeout", type=int, default=1200, metavar="SECONDS")
    up.add_argument("--served-model-name", default=VOXTRAL_MODEL)
    up.add_argument("--max-model-len", type=int, default=45000)
    up.add_argument("--max-num-seqs", type=int, default=4, help="concurrent streams per GPU")
    up.add_argument(
        "--vllm-option",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any vLLM flag, e.g. gpu-memory-utilization=0.85 or enforce-eager=true",
    )
    up.add_argument("--autoscaling-min", type=int)
    up.add_argument("--autoscaling-max", type=int)
    up.add_argument(
        "--autoscaling-target", type=float, default=3.0, help="concurrent streams per instance"
    )
    up.add_argument("--name-suffix", help="suffix of the new model/config names (default: time)")
    up.add_argument("--dry-run", action="store_true", help="print the API requests, call nothing")
    up.add_argument("--no-wait", action="store_true", help="return before InService")

    down = sub.add_parser("delete", help="delete the endpoint, its config and its models")
    down.add_argument("--endpoint-name", default=DEFAULT_ENDPOINT)
    down.add_argument("--region")
    return parser


def resolve_region(explicit: str | None) -> str:
    region = explicit or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        import boto3

        region = boto3.session.Session().region_name
    if not region:
        from botocore.exceptions import NoRegionError

        raise NoRegionError()
    return region


def spec_from_args(args: argparse.Namespace, region: str) -> DeploySpec:
    return DeploySpec(
        endpoint_name=args.endpoint_name,
        image_uri=args.image_uri,
        model_data_s3=args.model_data_s3,
        role_arn=args.role_arn,
        region=region,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        data_download_timeout_s=args.data_download_timeout,
        startup_health_timeout_s=args.startup_health_timeout,
        served_model_name=args.served_model_name,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        vllm_options=dict(args.vllm_option),
        autoscaling_min=args.autoscaling_min,
        autoscaling_max=args.autoscaling_max,
        autoscaling_target=args.autoscaling_target,
        name_suffix=args.name_suffix or default_suffix(),
    )


def how_to_call(spec: DeploySpec) -> str:
    name, region = spec.endpoint_name, spec.region
    return "\n".join(
        [
            f"Endpoint {name} is InService in {region}.",
            "",
            "Transcribe a file through it:",
            f"  voice-agent transcribe --sagemaker-endpoint {name} --region {region} file.wav",
            "Run the voice agent on it:",
            f"  VOICE_AGENT_PROFILE=sagemaker VOICE_AGENT_STT__SAGEMAKER__ENDPOINT_NAME={name} \\",
            f"  VOICE_AGENT_STT__SAGEMAKER__REGION={region} "
            f"VOICE_AGENT_STT__MODEL={spec.served_model_name} voice-agent serve",
            "Remove it (the instance bills until you do):",
            f"  voice-agent deploy delete --endpoint-name {name} --region {region}",
        ]
    )


ClientFactory = Callable[[str, str], Any]


def _boto3_client(service: str, region: str) -> Any:
    """A client from a fresh session: credentials are looked up now, not reused from a
    session that resolved them earlier in the process."""
    import boto3

    return boto3.session.Session(region_name=region).client(service)  # type: ignore[call-overload]


def main(argv: list[str] | None = None, *, client_factory: ClientFactory | None = None) -> int:
    """Returns 0 on success, 1 when AWS refused, 2 on bad options."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    make_client = client_factory or _boto3_client
    region: str | None = args.region
    instance_type = getattr(args, "instance_type", "")
    try:
        region = resolve_region(args.region)
        if args.action == "delete":
            deployer = Deployer(
                sagemaker=make_client("sagemaker", region),
                autoscaling=make_client("application-autoscaling", region),
            )
            deployer.delete(args.endpoint_name)
            print(f"Deleted endpoint {args.endpoint_name}, its config and models.")
            return 0
        spec = spec_from_args(args, region)
        if args.dry_run:
            calls = plan_deploy(spec, endpoint_exists=False)
            validate_calls(calls)
            print(
                "# dry run: nothing was called. If the endpoint exists, UpdateEndpoint replaces "
                "CreateEndpoint and the old config and model are deleted after the update.",
                file=sys.stderr,
            )
            print(json.dumps([c.to_json() for c in calls], indent=2))
            return 0
        autoscaling = (
            make_client("application-autoscaling", region) if spec.autoscaling_min else None
        )
        deployer = Deployer(sagemaker=make_client("sagemaker", region), autoscaling=autoscaling)
        deployer.deploy(spec, wait=not args.no_wait)
        if not args.no_wait:
            print(how_to_call(spec))
        return 0
    except DeployError as exc:
        print(f"voice-agent deploy: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _is_aws_error(exc):
            raise
        print(
            f"voice-agent deploy: {explain(exc, region=region, instance_type=instance_type)}",
            file=sys.stderr,
        )
        return 1


def _is_aws_error(exc: BaseException) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(exc, BotoCoreError | ClientError)


if __name__ == "__main__":
    sys.exit(main())
