"""The OpenAI-compatible server against a live uvicorn on 127.0.0.1 (one per module, over the tiny
``qwen2_chat`` checkpoint): the official ``openai`` client (completions, chat, streaming, ``n``,
logprobs, stop, seed), outputs equal to ``Generator`` on each request alone (8 concurrent
clients on 4 slots), a disconnect freeing its slot, nothing compiled while serving, and every
refusal as OpenAI's error object naming the field."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")

from fastapi.testclient import TestClient  # noqa: E402

from textkit.decoding import Generator  # noqa: E402
from textkit.pretrained import load_pretrained  # noqa: E402
from textkit.serve import engine as engine_module  # noqa: E402
from textkit.serve.app import Settings, create_app  # noqa: E402
from textkit.serve.engine import Engine  # noqa: E402

CHAT = Path(__file__).resolve().parent / "fixtures" / "decoders" / "qwen2_chat"
PROMPTS = ["hello world", "the cat", "a b c d e f", "ok", "zebra crossing at noon", "xyz",
           "one two", "Mary had a little lamb"]


def _engine(loaded, **options):
    return Engine(loaded.model, loaded.params, loaded.tokenizer, slots=4, context=256,
                  smallest_prefill=64, **options)


@pytest.fixture(scope="module")
def live():
    loaded = load_pretrained(CHAT)
    engine = _engine(loaded)
    engine.warm_up()
    compiled = (engine_module._decode._cache_size(), engine_module._insert._cache_size())
    app = create_app(loaded, Settings(model_name="tiny-chat"), engine=engine)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    yield SimpleNamespace(url=url, loaded=loaded, engine=engine, compiled=compiled,
                          client=openai.OpenAI(base_url=f"{url}/v1", api_key="none"),
                          generator=Generator.from_pretrained(loaded, batch_size=1))
    server.should_exit = True
    thread.join()


def _alone(live, prompt, **options):
    return live.generator.generate(live.loaded.params, [prompt], **options)[0]


@pytest.mark.slow
def test_completions_equal_the_generator_alone_under_concurrency(live):
    def ask(prompt):
        return live.client.completions.create(model="tiny-chat", prompt=prompt, max_tokens=12,
                                              temperature=0)

    with ThreadPoolExecutor(8) as pool:              # 8 clients on 4 slots
        answers = list(pool.map(ask, PROMPTS))
    for prompt, answer in zip(PROMPTS, answers):
        expected = _alone(live, prompt, max_new_tokens=12)
        choice = answer.choices[0]
        assert choice.text == expected.text, prompt
        assert choice.finish_reason == ("length" if expected.finish_reason == "length"
                                        else "stop")
        assert answer.usage.prompt_tokens == expected.prompt_tokens
        assert answer.usage.completion_tokens == len(expected.token_ids)
    assert (engine_module._decode._cache_size(),
            engine_module._insert._cache_size()) == live.compiled   # nothing compiled


def test_seeded_sampling_n_logprobs_stop_and_echo(live):
    ask = dict(model="tiny-chat", prompt="the cat", max_tokens=10, temperature=0.9, top_p=0.9,
               seed=11, n=3, logprobs=2)
    first = live.client.completions.create(**ask)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert len({c.text for c in first.choices}) > 1
    assert first.model_dump()["choices"] == live.client.completions.create(
        **ask).model_dump()["choices"]
    expected = live.generator.generate(live.loaded.params, ["the cat"], seed=11, logprobs=2,
                                       do_sample=True, temperature=0.9, top_p=0.9, top_k=0,
                                       max_new_tokens=10, num_return_sequences=3)
    for choice, result in zip(first.choices, expected):
        assert choice.text == result.text
        assert choice.logprobs.token_logprobs == pytest.approx(result.logprobs, abs=1e-5)
        assert all(len(top) <= 2 for top in choice.logprobs.top_logprobs)
    whole = live.client.completions.create(model="tiny-chat", prompt="the cat", max_tokens=12,
                                           temperature=0, echo=True)
    text = whole.choices[0].text
    assert text.startswith("the cat")
    stop = text[len("the cat") + 2:len("the cat") + 4]
    cut = live.client.completions.create(model="tiny-chat", prompt="the cat", max_tokens=12,
                                         temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[len("the cat"):].split(stop)[0]


def test_chat_whole_and_streamed(live):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    whole = live.client.chat.completions.create(model="tiny-chat", messages=messages,
                                                max_tokens=8, temperature=0, logprobs=True,
                                                top_logprobs=3)
    expected = live.generator.chat(live.loaded.params, messages, max_new_tokens=8)[0]
    assert whole.choices[0].message.content == expected.text
    assert whole.choices[0].message.role == "assistant"
    assert len(whole.choices[0].logprobs.content) == len(expected.token_ids)
    assert all(len(t.top_logprobs) == 3 for t in whole.choices[0].logprobs.content)
    assert whole.usage.completion_tokens == len(expected.token_ids)
    stream = live.client.chat.completions.create(model="tiny-chat", messages=messages,
                                                 max_tokens=8, temperature=0, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].usage.completion_tokens == len(expected.token_ids)
    with httpx.stream("POST", f"{live.url}/v1/completions",
                      json={"prompt": "ok", "max_tokens": 4, "stream": True}) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_a_disconnect_frees_its_slot(live, monkeypatch):
    step = live.engine.step

    def slow_step():        # 240 tokens take over 4 s: the client leaves long before
        time.sleep(0.02)
        step()

    monkeypatch.setattr(live.engine, "step", slow_step)
    before = live.engine.generated_tokens
    with httpx.stream("POST", f"{live.url}/v1/completions",
                      json={"prompt": "the cat", "max_tokens": 240, "stream": True,
                            "temperature": 0}) as response:
        next(response.iter_lines())
        assert live.engine.active_slots == 1
    deadline = time.monotonic() + 10
    while live.engine.active_slots and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live.engine.active_slots == 0
    assert live.engine.generated_tokens - before < 200      # freed, not run to its end
    metrics = httpx.get(f"{live.url}/metrics").text
    assert "textkit_active_slots 0" in metrics and "textkit_generated_tokens_total" in metrics


def test_health_and_models(live):
    assert httpx.get(f"{live.url}/health").json() == {"status": "ok"}
    assert [m.id for m in live.client.models.list()] == ["tiny-chat"]
    assert "textkit chat" in httpx.get(f"{live.url}/").text


@pytest.mark.parametrize("body, status, param", [
    (b"{not json", 400, None),
    ({"prompt": "a", "max_tokens": "many"}, 400, "max_tokens"),
    ({"prompt": "a", "max_tokens": "12"}, 400, "max_tokens"),
    ({"prompt": "a", "stream": "yes"}, 400, "stream"),
    ({"prompt": "a", "temperature": 3}, 400, "temperature"),
    ({"prompt": "a", "model": "gpt-4"}, 404, "model"),
    ({"prompt": "a", "max_tokens": 300}, 400, "max_tokens"),
    ({"prompt": "a " * 300}, 400, "prompt"),
    ({"prompt": [99999]}, 400, "prompt"),
    ({"prompt": "a", "logprobs": 6}, 400, "logprobs"),
    ({"prompt": "a", "frobnicate": 1}, 400, "frobnicate"),
    ({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
])
def test_bad_completions_name_the_field(live, body, status, param):
    data = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = httpx.post(f"{live.url}/v1/completions", **data)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_bad_chat_requests_name_the_field(live):
    for body, param in [({"messages": []}, "messages"),
                        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
                        ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
                         "top_logprobs"),
                        ({"messages": [{"role": "user", "content": "x"}],
                          "max_completion_tokens": 10_000}, "max_completion_tokens")]:
        response = httpx.post(f"{live.url}/v1/chat/completions", json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_api_key_full_queue_and_timeout(live):
    idle = _engine(live.loaded, max_queue=1)     # never started: jobs wait
    keyed = create_app(live.loaded, Settings(model_name="m", api_key="sesame",
                                             request_timeout=1.0), engine=idle)
    client = TestClient(keyed)
    assert client.post("/v1/completions", json={"prompt": "a"}).status_code == 401
    assert client.get("/").status_code == 200
    auth = {"Authorization": "Bearer sesame"}
    too_many = client.post("/v1/completions", json={"prompt": "a", "n": 2}, headers=auth)
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "n"
    with ThreadPoolExecutor(1) as pool:     # one request waits in the queue of one ...
        waiting = pool.submit(client.post, "/v1/completions", json={"prompt": "a"},
                              headers=auth)
        while not idle.queue_depth:
            time.sleep(0.01)
        full = client.post("/v1/completions", json={"prompt": "a"}, headers=auth)
        late = waiting.result()
    assert full.status_code == 429 and full.headers["Retry-After"] == "1"
    assert full.json()["error"]["type"] == "rate_limit_error"
    assert late.status_code == 504 and late.json()["error"]["type"] == "timeout"
    assert all(job.cancelled for job in idle._queue)     # ... until its time ran out


def test_metrics_are_prometheus_text(live):
    text = httpx.get(f"{live.url}/metrics").text
    for name in ("textkit_queue_depth", "textkit_active_slots", "textkit_tokens_per_second",
                 "textkit_requests_total"):
        assert f"# TYPE {name} " in text
    assert json.dumps("/v1/completions") in text


FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.slow
def test_embeddings_of_a_sentence_encoder():
    import numpy as np

    loaded = load_pretrained(FIXTURES / "sentence" / "bert_mean_normalize")
    client = TestClient(create_app(loaded, Settings(model_name="st", embed_batch=4)))
    texts = ["a short one", "another sentence here", "x"]
    data = client.post("/v1/embeddings", json={"input": texts}).json()
    vectors = np.asarray([d["embedding"] for d in data["data"]])
    batch = loaded.tokenizer.encode_batch(texts)
    expected = loaded.model.apply({"params": loaded.params}, **batch)["sentence_embedding"]
    np.testing.assert_allclose(vectors, np.asarray(expected), atol=1e-5)
    assert data["usage"]["prompt_tokens"] == int(batch["attention_mask"].sum())
    one = client.post("/v1/embeddings", json={"input": "x"}).json()["data"]
    assert one[0]["embedding"] == pytest.approx(vectors[2].tolist(), abs=1e-6)
    bad = client.post("/v1/embeddings", json={"input": ["a " * 600]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"
    assert client.post("/v1/completions", json={"prompt": "a"}).status_code == 404


@pytest.mark.slow
def test_translate_with_a_translation_checkpoint():
    from textkit.pretrained import load_translator

    root = FIXTURES / "tiny_marian"
    translator, params = load_translator(root)
    client = TestClient(create_app(load_pretrained(root), Settings(model_name="mt"),
                                   translator_for=lambda src, tgt, beam: (translator, params)))
    texts = ["hello world", "a test"]
    answer = client.post("/v1/translate", json={"text": texts}).json()
    assert answer["translations"] == translator.translate(params, texts)
    bad = client.post("/v1/translate", json={"text": "not a list"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text"
    coded = client.post("/v1/translate", json={"text": ["a"], "tgt_lang": "de"})
    assert coded.status_code == 400 and coded.json()["error"]["param"] == "tgt_lang"


@pytest.mark.slow
def test_chat_page_streams_a_reply(live, tmp_path):
    """Debian's chromium + chromium-driver drive the page: a system prompt, a message, the
    streamed reply; the screenshot is saved (``TEXTKIT_CHAT_SCREENSHOT``: where, e.g. the
    docs' docs/images/chat_page.png)."""
    import os
    import shutil

    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("needs Debian's chromium and chromium-driver packages")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=900,700"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.get(live.url + "/")
        driver.find_element(By.ID, "system").send_keys("Be brief.")
        driver.find_element(By.ID, "message").send_keys("Hello there")
        driver.find_element(By.ID, "send").click()
        WebDriverWait(driver, 60).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, ".assistant.done"))
        assert driver.find_element(By.CSS_SELECTOR, ".assistant span").text
        assert driver.find_element(By.CSS_SELECTOR, ".user span").text == "Hello there"
        assert driver.find_element(By.ID, "stop").get_attribute("disabled")
        path = Path(os.environ.get("TEXTKIT_CHAT_SCREENSHOT", tmp_path / "chat_page.png"))
        assert driver.save_screenshot(str(path)) and path.stat().st_size > 1000
    finally:
        driver.quit()


def test_an_engine_error_fails_requests_and_health(live, caplog):
    broken = _engine(live.loaded)

    def fail():
        raise RuntimeError("boom")

    broken.step = fail
    with TestClient(create_app(live.loaded, Settings(model_name="m"), engine=broken)) as client:
        first = client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2})
        assert first.status_code == 503
        health = client.get("/health")
        assert health.status_code == 503 and "boom" in health.json()["reason"]
        later = client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2})
        assert later.status_code == 503 and "boom" in later.json()["error"]["message"]
    assert "the engine stopped on an error" in caplog.text
