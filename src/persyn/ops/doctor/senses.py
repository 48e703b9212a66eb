"""`persyn doctor`'s lines for the senses (§22): whether the agent can see the images people send
(the `caption` model's provider) and hear their voice notes (`[models] transcribe`). Both are
optional: without them an image is kept and the agent says it could not see it ("[an image … that
I could not see …]"), a voice note is kept and the agent says it could not listen to it ("[a
voice note I could not listen to: …]"). Nothing is called: a probe would be billed."""

from __future__ import annotations

from persyn.core.config import AgentConfig, Settings, Task
from persyn.core.errors import PersynError
from persyn.gateway.registry import ModelSpec, parse_model_string
from persyn.ops.doctor.postgres import Check
from persyn.senses.hearing import LOCAL_EXTRA_HINT, build_transcriber, local_whisper_available

__all__ = ["sees", "senses_checks"]


def sees(spec: ModelSpec) -> bool:
    """Whether `spec`'s provider takes images, as the profiles the providers build say
    (`ModelGateway.can_see` reads the built model's): the bundled `local:` model does not, nor
    does any double but `test:vision`."""
    if spec.provider == "local":
        return False
    if spec.provider == "test":
        return spec.name == "vision"
    return True


def senses_checks(settings: Settings) -> list[Check]:
    return [*(_seeing(settings, agent) for agent in settings.agents), _hearing(settings)]


def _seeing(settings: Settings, agent: AgentConfig) -> Check:
    label = f"seeing ({agent.name})" if len(settings.agents) > 1 else "seeing"
    raw = settings.model_for(agent, Task.CAPTION)
    try:
        spec = parse_model_string(raw, settings.secrets, Task.CAPTION)
    except PersynError as exc:
        return Check(label, False, str(exc), "fix [models] caption")
    if sees(spec):
        return Check(label, True, f"images are captioned by {spec}")
    return Check(
        label,
        True,
        f"{spec} cannot see images: they are kept, and the agent says it could not see them",
        'set [models] caption to a model that can (e.g. "anthropic:claude-haiku-4-5")',
        warning=True,
    )


def _hearing(settings: Settings) -> Check:
    spec = settings.models.transcribe
    try:
        build_transcriber(spec, language=settings.senses.transcribe_language)
    except PersynError as exc:
        return Check("hearing", False, str(exc), "fix [models] transcribe")
    if spec.startswith("local:") and not local_whisper_available():
        return Check(
            "hearing",
            True,
            "the packaged speech model is not installed: voice notes are kept, and the agent says "
            "it could not listen to them",
            LOCAL_EXTRA_HINT,
            warning=True,
        )
    return Check("hearing", True, f"voice notes are transcribed by {spec}")
