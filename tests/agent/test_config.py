"""The settings tree: profiles, environment overrides, and errors that say what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import PROFILES, ConfigError, load_settings
from agent.stt.params import RealtimeSTTParams


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("VOICE_AGENT_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_shipped_profile_loads(profile: str) -> None:
    settings = load_settings(profile)
    assert settings.profile == profile


def test_the_default_profile_is_offline_and_starts_local_services() -> None:
    settings = load_settings()
    assert settings.server.start_local_services
    assert settings.llm.kind == "local"  # the packaged small model, on loopback
    assert settings.llm.base_url == f"http://127.0.0.1:{settings.llm.local.port}/v1"
    assert settings.llm.model
    assert settings.tts.kind == "piper"
    assert settings.stt.url.endswith(f":{settings.asr_server.port}/v1/realtime")
    assert settings.stt.model == settings.asr_server.served_model_name


def test_the_llm_kind_follows_the_url_unless_set() -> None:
    assert load_settings("vllm").llm.kind == "openai"
    assert load_settings("sagemaker").llm.kind == "openai"
    echo = load_settings(overrides={"llm": {"kind": "echo"}}).llm
    assert echo.kind == "echo"


def test_a_local_llm_with_a_base_url_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"llm\.base_url is for llm\.kind 'openai'"):
        load_settings(overrides={"llm": {"base_url": "http://gpu:8001/v1", "model": "m"}})
    with pytest.raises(ConfigError, match=r"needs llm\.base_url"):
        load_settings(overrides={"llm": {"kind": "openai"}})


def test_gpu_profiles_start_nothing_local() -> None:
    assert not load_settings("vllm").server.start_local_services
    sagemaker = load_settings("sagemaker")
    assert not sagemaker.server.start_local_services
    assert sagemaker.stt.transport == "sagemaker"


def test_environment_variables_override_the_profile_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_STT__URL", "ws://gpu:8000/v1/realtime")
    monkeypatch.setenv("VOICE_AGENT_SERVER__MAX_CALLS", "7")
    monkeypatch.setenv("VOICE_AGENT_PROFILE", "vllm")
    settings = load_settings()
    assert settings.profile == "vllm"
    assert settings.stt.url == "ws://gpu:8000/v1/realtime"
    assert settings.server.max_calls == 7


def test_a_wrong_value_names_the_setting_and_the_variable_to_fix_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VOICE_AGENT_STT__URL", "http://gpu:8000")
    with pytest.raises(ConfigError) as caught:
        load_settings("vllm")
    message = str(caught.value)
    assert "stt.url" in message and "ws://" in message
    assert "VOICE_AGENT_STT__URL" in message


def test_a_wrong_stt_knob_names_the_knob_and_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VOICE_AGENT_STT__PARAMS__PREROLL_S", "5")
    with pytest.raises(ConfigError) as caught:
        load_settings("default")
    message = str(caught.value)
    assert "stt.params.preroll_s" in message and "between 0.0 and 2.0" in message
    assert "VOICE_AGENT_STT__PARAMS__PREROLL_S" in message


def test_stt_knobs_are_the_services_own_params(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_STT__PARAMS__CHUNK_MS", "40")
    params = load_settings("default").stt.params
    assert isinstance(params, RealtimeSTTParams)
    assert params.chunk_ms == 40 and params.ttfs_p99_latency == 1.0  # env + profile file


def test_an_unknown_setting_is_refused_not_ignored(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text('[stt]\nmodle = "typo"\n')
    with pytest.raises(ConfigError, match=r"stt\.modle.*no such setting"):
        load_settings("mine", config_dir=tmp_path)


def test_sagemaker_without_an_endpoint_fails_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICE_AGENT_STT__SAGEMAKER__ENDPOINT_NAME", "")
    with pytest.raises(ConfigError, match="VOICE_AGENT_STT__SAGEMAKER__ENDPOINT_NAME"):
        load_settings("sagemaker")


def test_an_llm_url_without_a_model_says_which_variable_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__MODEL", "")
    with pytest.raises(ConfigError, match="VOICE_AGENT_LLM__MODEL"):
        load_settings("vllm")


def test_an_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="default, sagemaker, vllm"):
        load_settings("nope")


def test_broken_toml_is_reported_with_its_file(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("[stt\n")
    with pytest.raises(ConfigError, match=r"bad\.toml is not valid TOML"):
        load_settings("bad", config_dir=tmp_path)


def test_ice_servers_take_plain_urls_or_turn_credentials() -> None:
    settings = load_settings(
        overrides={
            "server": {
                "ice_servers": [
                    "stun:stun.example.org:3478",
                    {"urls": "turn:t.example.org", "shared_secret": "s"},
                    {
                        "urls": "turn:t2.example.org",
                        "username": "u",
                        "credential": "p",
                        "static_credentials": True,
                    },
                ]
            }
        }
    )
    stun, turn, static = settings.server.ice_servers
    assert stun.urls == "stun:stun.example.org:3478" and stun.username is None
    assert turn.shared_secret == "s" and turn.credential_ttl_s == 3600
    assert (static.username, static.credential) == ("u", "p")


def test_a_static_turn_password_is_refused_unless_explicitly_handed_out() -> None:
    """POST /start is public: a static password in it is anyone's; the error says what to do."""
    static = {"urls": "turn:t.example.org", "username": "u", "credential": "p"}
    with pytest.raises(ConfigError, match=r"server\.ice_servers\.0.*shared_secret.*static_cred"):
        load_settings(overrides={"server": {"ice_servers": [static]}})
    both = {"urls": "turn:t.example.org", "shared_secret": "s", "username": "u"}
    with pytest.raises(ConfigError, match="not both"):
        load_settings(overrides={"server": {"ice_servers": [both]}})


def test_call_records_are_off_unless_a_directory_is_set_and_recording_needs_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for profile in PROFILES:
        records = load_settings(profile).records
        assert records.directory is None and not records.recording
    monkeypatch.setenv("VOICE_AGENT_RECORDS__RECORDING", "true")
    with pytest.raises(ConfigError, match="VOICE_AGENT_RECORDS__DIRECTORY"):
        load_settings("default")
    monkeypatch.setenv("VOICE_AGENT_RECORDS__DIRECTORY", str(tmp_path))
    assert load_settings("default").records.directory == tmp_path


def test_a_transfer_needs_destinations_that_are_numbers_or_sip_uris() -> None:
    with pytest.raises(ConfigError, match=r"transfer\.destinations"):
        load_settings(overrides={"transfer": {"enabled": True}})
    with pytest.raises(ConfigError, match=r"'555-0100' is neither an E\.164 number"):
        load_settings(overrides={"transfer": {"destinations": ["555-0100"]}})
    settings = load_settings(
        overrides={"transfer": {"enabled": True, "destinations": ["+15550100", "sip:a@b.c"]}}
    )
    assert not settings.twilio.rest_enabled  # and so the tool will not be offered


def test_trusted_proxies_are_addresses_or_networks() -> None:
    server = load_settings(
        "default", overrides={"server": {"trusted_proxies": ["10.0.0.0/8", "127.0.0.1"]}}
    ).server
    assert server.trusted_proxies == ["10.0.0.0/8", "127.0.0.1"]
    with pytest.raises(ConfigError, match=r"server\.trusted_proxies.*ingress-nginx"):
        load_settings("default", overrides={"server": {"trusted_proxies": ["ingress-nginx"]}})
