"""Transcription is a model call like any other (issue 35 item 5): a remote transcriber's
seconds are priced from the `per_audio_minute` price, visible in `persyn usage --by stage`, the
call is a `model transcribe` span in the trace, and a self-initiated run whose autonomy budget is
used is refused the call (nothing reaches the transcriber) while its turn goes on."""

from __future__ import annotations

import io
import wave
from datetime import timedelta
from pathlib import Path

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from persyn.core.events import Upload
from persyn.runtime.background.autonomy import recent_activity
from persyn.schedule import at_trigger, set_reminder
from persyn.testing import run_runtime
from persyn.testing.transcriptions import serve_fake_transcriptions
from persyn.tracing.base import ATTR
from persyn.usage import context as usage_context
from persyn.usage.ledger import summarize_records


def silent_wav(seconds: float = 3.0) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(16_000)
        sound.writeframes(b"\0\0" * int(16_000 * seconds))
    return out.getvalue()


def _config(url: str, extra: str = "") -> str:
    model = f"openai:whisper-1@{url}"
    return (
        "[deliberation]\nenabled = false\n"
        f'[models]\ntranscribe = "{model}"\n'
        f'[prices."{model}"]\ninput = 0\noutput = 0\nper_audio_minute = 0.006\n' + extra
    )


async def test_a_remote_transcription_is_priced_per_minute_traced_and_in_usage_by_stage(
    tmp_path: Path,
) -> None:
    spans = InMemorySpanExporter()
    tracing = '[tracing]\nenabled = true\ncontent = "full"\nexporters = []\n'
    with serve_fake_transcriptions("bring the ladder") as api:
        async with run_runtime(
            tmp_path / "home", model="test:echo", config=_config(api.url, tracing), span_exporters=[spans]
        ) as pilot:
            attachments = await pilot.runtime.keep_attachments(
                pilot.agent.id, "test", "room", "sam", [Upload(data=silent_wav(30.0))]
            )
            event = pilot.event("", channel="room").model_copy(update={"attachments": attachments})
            marker = await pilot.submit(event)
            assert marker.text == 'You said: [voice note, 30 s: "bring the ladder"]'
            records = pilot.usage()
            assert pilot.runtime.tracing.force_flush()
    model = f"openai:whisper-1@{api.url}"
    (heard,) = [record for record in records if record.stage == "transcribe"]
    assert (heard.model, heard.units, heard.cost_usd, heard.channel) == (model, 30, 0.003, "room")
    (row,) = [row for row in summarize_records(list(records), by="stage").rows if row.key == "transcribe"]
    assert (row.calls, row.units, row.cost_usd, row.unpriced_calls) == (1, 30, 0.003, 0)
    (span,) = [span for span in spans.get_finished_spans() if span.name == "model transcribe"]
    values = dict(span.attributes or {})
    assert values[ATTR.STAGE] == "transcribe" and values[ATTR.MODEL] == model
    assert values[ATTR.AUDIO_SECONDS] == 30.0 and values[ATTR.USAGE_ID] == heard.id
    assert values[ATTR.OUTPUT] == "bring the ladder"


async def test_a_run_whose_budget_is_used_is_refused_the_transcription_and_goes_on(
    tmp_path: Path,
) -> None:
    budget = "[autonomy]\ndaily_token_budget = 1\n"
    with serve_fake_transcriptions() as api:
        async with run_runtime(
            tmp_path / "home", model="test:echo", config=_config(api.url, budget)
        ) as pilot:
            now = pilot.clock.now()
            await set_reminder(
                pilot.full_store, pilot.agent.id, "listen", at_trigger(now + timedelta(minutes=1), now), now
            )
            assert await pilot.fire(timedelta(minutes=2)) == 1  # its respond call uses the day's budget
            (run,) = await recent_activity(pilot.full_store, pilot.agent.id)
            attachments = await pilot.runtime.keep_attachments(
                pilot.agent.id, "test", "room", "sam", [Upload(data=silent_wav())]
            )
            event = pilot.event("what is this?", channel="room").model_copy(
                update={"attachments": attachments}
            )
            with usage_context.bind(usage_context.Attribution(agent_id=pilot.agent.id, thread_id=run.id)):
                heard = await pilot.runtime.senses.perceive(event)
            records = pilot.usage()
    assert api.requests == []
    assert [record for record in records if record.stage == "transcribe"] == []
    assert heard.text.startswith(
        "[a voice note I could not listen to: stopped: the autonomy budget of 1 tokens"
    )
    assert heard.text.endswith("] what is this?")


async def test_a_runs_transcriptions_count_against_its_budget_and_one_past_it_is_refused_first(
    tmp_path: Path,
) -> None:
    """`[autonomy] tokens_per_audio_second`: the seconds a self-initiated run has transcribed
    are charged to its spend; a voice note whose declared length would take the run past the
    budget is refused before anything reaches the transcriber, and the run is not stopped."""
    budget = "[autonomy]\ndaily_token_budget = 200000\ntokens_per_audio_second = 10000\n"
    with serve_fake_transcriptions("bring the ladder") as api:
        async with run_runtime(
            tmp_path / "home", model="test:echo", config=_config(api.url, budget)
        ) as pilot:
            agent = pilot.agent.id
            now = pilot.clock.now()
            await set_reminder(
                pilot.full_store, agent, "listen", at_trigger(now + timedelta(minutes=1), now), now
            )
            assert await pilot.fire(timedelta(minutes=2)) == 1
            (run,) = await recent_activity(pilot.full_store, agent)
            before = await pilot.full_store.get_run(agent, run.id)
            assert before is not None and before.tokens < 50_000  # the run's own calls: a little

            async def hear(seconds: float) -> str:
                attachments = await pilot.runtime.keep_attachments(
                    agent, "test", "room", "sam", [Upload(data=silent_wav(seconds))]
                )
                event = pilot.event("", channel="room").model_copy(update={"attachments": attachments})
                with usage_context.bind(usage_context.Attribution(agent_id=agent, thread_id=run.id)):
                    return (await pilot.runtime.senses.perceive(event)).text

            assert await hear(3.0) == '[voice note, 3 s: "bring the ladder"]'
            charged = await pilot.full_store.get_run(agent, run.id)
            assert charged is not None and charged.tokens == before.tokens + 30_000
            assert len(api.requests) == 1

            refused = await hear(30.0)  # 300,000 tokens: past the budget, refused first
            assert refused.startswith("[a voice note I could not listen to: this would take 300000 tokens")
            assert len(api.requests) == 1  # nothing reached the transcriber
            after = await pilot.full_store.get_run(agent, run.id)
            assert after is not None and after.tokens == charged.tokens and after.stopped is None
            assert await hear(2.0) == '[voice note, 2 s: "bring the ladder"]'  # the run goes on
