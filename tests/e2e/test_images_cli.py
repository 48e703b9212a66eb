"""`persyn tools call generate_image` through the real CLI against the loopback fake of the
OpenAI images API: the operator checks an `[images]` configuration by a real render, metered
to the usage log with its per-image price; a refused render exits 1 with the provider's
reason; `persyn tools list` and `persyn doctor` show the tools (ARCHITECTURE §21)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from persyn_cli import Persyn

from persyn.testing.images import FakeImagesApi, serve_fake_images
from persyn.tools.images.generate import sniff_mime

pytestmark = pytest.mark.e2e


@pytest.fixture
def api() -> Iterator[FakeImagesApi]:
    with serve_fake_images() as fake:
        yield fake


@pytest.fixture
def configured(persyn: Persyn, api: FakeImagesApi) -> Persyn:
    config = persyn.home / "persyn.toml"
    config.write_text(config.read_text() + '\n[prices.images]\n"gpt-image-1" = 0.04\n')
    persyn.env["PERSYN_IMAGES__BASE_URL"] = api.url  # the starter file has an [images] table
    return persyn


def test_a_render_checked_from_the_cli_is_kept_and_metered(configured: Persyn, api: FakeImagesApi) -> None:
    listed = configured.run("tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {"generate_image", "edit_image"} <= {t["name"] for t in json.loads(listed.stdout)["tools"]}

    done = configured.run("tools", "call", "generate_image", "--args", '{"prompt": "a fox in the snow"}')
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == "rendered" and answer["reference"].startswith("img-")
    image_file = Path(answer["file"])
    assert image_file == configured.home / "data" / "images" / f"{answer['reference']}.png"
    assert sniff_mime(image_file.read_bytes()) == "image/png"
    assert [r.fields["prompt"] for r in api.requests] == ["a fox in the snow"]
    records = [json.loads(line) for line in (configured.home / "usage.jsonl").read_text().splitlines()]
    (image,) = [r for r in records if r["stage"] == "image"]
    assert (image["model"], image["units"], image["cost_usd"]) == ("gpt-image-1", 1, 0.04)

    doctor = configured.run("doctor")
    assert f"{api.url} (gpt-image-1); priced per image" in doctor.stdout


def test_a_refused_render_exits_1_with_the_providers_reason(configured: Persyn, api: FakeImagesApi) -> None:
    api.mode = "refuse"
    done = configured.run("tools", "call", "generate_image", "--args", '{"prompt": "something forbidden"}')
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "render failed: the images API refused (HTTP 400): Your request was rejected" in done.stderr
    assert "Traceback" not in done.stderr
    usage = configured.home / "usage.jsonl"
    assert not usage.exists() or all(
        json.loads(line)["stage"] != "image" for line in usage.read_text().splitlines()
    )
