"""llama.cpp's OpenAI-compatible server, with one-token logprobs read from the last position.

Run as ``python -m agent.local.llm_app`` with ``python -m llama_cpp.server``'s own options and
``--question_slots`` (:func:`agent.local.llm_server.llm_server_argv`). It is llama-cpp-python's
app, every route unchanged, but for ``/v1/completions`` with ``logprobs``: the text end of
turn's question (one token, temperature 0) is answered by
:func:`~agent.local.next_token.next_token_completion`, whose cost does not grow with the
conversation. So the model can run with ``logits_all`` off, and the answers no longer keep a
vocabulary-wide row of logits for every token they read. Other logprobs requests, which
llama-cpp-python could not serve with ``logits_all`` off, get a 400 saying what this server
gives.

With ``--question_slots N`` (N ≥ 1) the questions are read on a context of their own, one
sequence for each of the N callers (the request's ``user``) that asked last, and do not wait
for the answers' lock (:mod:`agent.local.question_slots`); each about words is then read into
the answers' context once it is free, for the answer that follows
(:mod:`agent.local.answers_warmer`). With 0 they share the answers' context and wait behind
them.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request, status
from llama_cpp.server import app as llama_app
from llama_cpp.server.cli import add_args_from_model
from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings
from llama_cpp.server.types import CreateCompletionRequest
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from agent.local.answers_warmer import AnswersWarmer
from agent.local.next_token import next_token_completion, token_id
from agent.local.question_slots import PromptTooLong, QuestionSlots, SharedContext

ONE_TOKEN_ONLY = (
    "this server reports logprobs for one greedy next token only: send max_tokens 1, "
    "temperature 0, a single prompt, and no stream, echo, suffix, grammar or n above 1"
)


EMPTY_PROMPT = "the prompt is empty: give the text to continue"


def _reads_one_next_token(body: CreateCompletionRequest) -> bool:
    return (
        body.max_tokens == 1
        and body.temperature == 0
        and not body.stream
        and not body.echo
        and body.suffix is None
        and body.grammar is None
        and (body.n or 1) == 1
        and (body.best_of or 1) == 1
        and (isinstance(body.prompt, str) or len(body.prompt) == 1)
    )


async def create_completion(request: Request, body: CreateCompletionRequest) -> Any:
    """``/v1/completions``: llama-cpp-python's own, but for one-token logprobs (and a 400 for
    an empty prompt, on which llama-cpp-python's own fails with a 500)."""
    if not body.prompt or not any(body.prompt):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=EMPTY_PROMPT)
    if body.logit_bias and body.logit_bias_type != "tokens":
        _check_token_ids(body.logit_bias)  # llama-cpp-python's own fails on others with a 500
    if body.logprobs is None:
        return await llama_app.create_completion(request, body)
    if not _reads_one_next_token(body):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=ONE_TOKEN_ONLY)
    slots: QuestionSlots | None = request.app.state.question_slots
    if slots is None:
        async with contextlib.asynccontextmanager(llama_app.get_llama_proxy)() as proxy:
            return await _next_token(body, proxy, None)
    # The one model never changes (create_app), so its tokenizer needs no lock.
    completion = await _next_token(body, llama_app._llama_proxy, slots)
    warmer: AnswersWarmer = request.app.state.answers_warmer
    warmer.after_question(body.user, _prompt(body))
    return completion


def _prompt(body: CreateCompletionRequest) -> str:
    return body.prompt if isinstance(body.prompt, str) else body.prompt[0]


def _check_token_ids(logit_bias: dict[str, float]) -> None:
    proxy = llama_app._llama_proxy
    if proxy is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail="no model loaded yet")
    vocabulary = proxy().n_vocab()
    try:
        for key in logit_bias:
            token_id(key, vocabulary)
    except ValueError as error:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=f"bad request: {error}") from None


async def _next_token(
    body: CreateCompletionRequest, proxy: Any, slots: QuestionSlots | None
) -> dict[str, Any]:
    """The question's completion, read in ``slots`` or (``None``, the caller holding the
    answers' lock) on the answers' context."""
    kwargs: dict[str, Any] = {}
    llama = llama_app.prepare_request_resources(body, proxy, body.model, kwargs)
    try:
        return await run_in_threadpool(
            next_token_completion,
            llama,
            _prompt(body),
            reader=slots if slots is not None else SharedContext(llama),
            caller=body.user,
            top=body.logprobs or 0,
            logit_bias=kwargs.get("logit_bias"),
            model=body.model,
        )
    except ValueError as error:  # PromptTooLong, an empty prompt, a bad token id
        kind = "prompt too long" if isinstance(error, PromptTooLong) else "bad request"
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=f"{kind}: {error}") from None


def create_app(
    server_settings: ServerSettings, model_settings: list[ModelSettings], *, question_slots: int
) -> FastAPI:
    """llama-cpp-python's app with :func:`create_completion` in front of its own route, serving
    one model, with ``question_slots`` sequences for the questions (0: on the answers' context).
    """
    if len(model_settings) != 1:
        raise ValueError(f"llm_app serves one model, not {len(model_settings)}")
    if question_slots < 0:
        raise ValueError(f"question_slots ({question_slots}) must be 0 or more")
    app = llama_app.create_app(server_settings=server_settings, model_settings=model_settings)
    proxy = llama_app._llama_proxy  # set by create_app, with its one model loaded
    assert proxy is not None
    app.state.question_slots = QuestionSlots(proxy(), question_slots) if question_slots else None
    app.state.answers_warmer = AnswersWarmer(
        contextlib.asynccontextmanager(llama_app.get_llama_proxy)
    )
    app.add_api_route(
        "/v1/completions",
        create_completion,
        methods=["POST"],
        dependencies=[Depends(llama_app.authenticate)],
        summary="Completion",
    )
    app.router.routes.insert(0, app.router.routes.pop())  # matched before llama-cpp-python's
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_args_from_model(parser, Settings)
    parser.add_argument(
        "--question_slots",
        type=int,
        default=0,
        help="callers whose one-token logprobs questions keep a sequence of their own on a "
        "second context (n_ctx tokens each); 0: on the answers' context, behind their lock",
    )
    args = parser.parse_args(argv)
    question_slots = args.question_slots
    given = {
        name: value
        for name, value in vars(args).items()
        if value is not None and name != "question_slots"
    }
    try:
        server = ServerSettings.model_validate(
            {k: v for k, v in given.items() if k in ServerSettings.model_fields}
        )
        model = ModelSettings.model_validate(
            {k: v for k, v in given.items() if k in ModelSettings.model_fields}
        )
    except ValidationError as error:
        sys.exit(f"llm_app: {error}")
    uvicorn.run(
        create_app(server, [model], question_slots=question_slots),
        host=server.host,
        port=server.port,
        ssl_keyfile=server.ssl_keyfile,
        ssl_certfile=server.ssl_certfile,
    )


if __name__ == "__main__":
    main()
