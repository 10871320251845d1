"""Prompt logprobs through the real `tensorfold serve` (demo model) with the official openai SDK: legacy
completions with echo + logprobs, as lm-evaluation-harness scores a continuation. The prompt's logprobs
equal, bit for bit, those the server reported when it generated the same tokens; streamed and whole
replies carry the same entries."""

CONTEXT = "def fibonacci(n):\n    "


def test_echo_logprobs_score_the_prompt_like_generation(client, model):
    gen = client.completions.create(model=model, prompt=CONTEXT, max_tokens=12, temperature=0, logprobs=2)
    g = gen.choices[0].logprobs
    scored = client.completions.create(model=model, prompt=CONTEXT + gen.choices[0].text, max_tokens=1,
                                       temperature=0, logprobs=2, echo=True)
    s = scored.choices[0].logprobs
    assert scored.choices[0].text.startswith(CONTEXT + gen.choices[0].text)
    assert s.token_logprobs[0] is None and s.top_logprobs[0] is None
    assert all(lp is not None and lp <= 0 for lp in s.token_logprobs[1:])
    assert len(s.tokens) == len(s.token_logprobs) == len(s.top_logprobs) == len(s.text_offset)
    # The prompt ends with the generated tokens (the same text tokenizes back to them), then one new token.
    n = len(g.tokens)
    assert s.tokens[-1 - n:-1] == g.tokens
    assert s.token_logprobs[-1 - n:-1] == g.token_logprobs  # bitwise: same rows, same arithmetic
    assert s.top_logprobs[-1 - n:-1] == g.top_logprobs
    assert s.text_offset == sorted(s.text_offset) and s.text_offset[0] == 0


def test_streamed_echo_logprobs_equal_the_whole_reply(client, model):
    kw = dict(model=model, prompt=CONTEXT, max_tokens=6, temperature=0.8, seed=5, logprobs=1, echo=True)
    whole = client.completions.create(**kw)
    text, tokens, lps = "", [], []
    for chunk in client.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        text += c.text
        if c.logprobs:
            tokens += c.logprobs.tokens
            lps += c.logprobs.token_logprobs
    w = whole.choices[0].logprobs
    assert text == whole.choices[0].text
    assert tokens == w.tokens and lps == w.token_logprobs
