"""The local model's prompt rendering (gateway/_llama_server.py): the packaged pretrained Gemma
continues a chat log; instruction-tuned Gemma gets its turn markup."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")

from persyn.gateway._llama_server import render_gemma3, render_transcript

SYSTEM = (
    "You are Ada. Your identifier is 01KB0000000000000000000000.\n"
    "Your disposition: Curious, candid and warm; prefers honesty to agreement.\n\n"
    "Standing constraints:\n- be consistent\n\nIt is now Monday 30 November 2026, 9:00 in the morning (UTC).\n"
)


def test_a_persona_turn_becomes_a_chat_log_ending_with_the_agents_name() -> None:
    prompt, name = render_transcript(
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "[Sam] Hi there!"},
            {"role": "assistant", "content": "Hello Sam."},
            {"role": "user", "content": "[Sam] I just got back\nfrom Lisbon."},
        ]
    )
    assert name == "Ada"
    assert prompt.startswith("A text conversation between Ada and Sam. Ada writes back in a sentence or two")
    assert "Ada is curious, candid and warm; prefers honesty to agreement." in prompt
    assert "It is Monday 30 November 2026, 9:00 in the morning (UTC)." in prompt
    assert prompt.endswith("\n\nSam: Hi there!\nAda: Hello Sam.\nSam: I just got back from Lisbon.\nAda:")
    assert (
        "Standing constraints" not in prompt and "01KB" not in prompt
    )  # instructions a base model would echo


def test_other_requests_keep_gemmas_turn_markup() -> None:
    messages = [
        {"role": "system", "content": "Summarise the conversation."},
        {"role": "user", "content": "Sam: hi"},
    ]
    prompt, name = render_transcript(messages)
    assert name is None and prompt == render_gemma3(messages)
    assert prompt.startswith("<start_of_turn>user\nSummarise the conversation.\n\nSam: hi<end_of_turn>\n")
    assert prompt.endswith("<start_of_turn>model\n")
