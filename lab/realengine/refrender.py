#!/usr/bin/env python3
"""refrender.py: the reference rendering of chat templates, for realengine's
tokenization check (cmd/tokcheck).

Renders each case with Python's jinja2 in the environment Hugging Face
transformers' apply_chat_template uses (ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension, a tojson that keeps
non-ASCII characters and key order, raise_exception and strftime_now), so
that the replica server's JavaScript rendering (chat.mjs over
@huggingface/jinja) is compared with an independent Jinja implementation.

  python3 refrender.py < cases.json > renderings.json

Input: {"template": "...", "chats": [{"messages": [...], "tools": [...]}]}.
Output: a JSON list of rendered strings, one per chat, in order.
"""

import json
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.exit("refrender.py needs jinja2 (pip install jinja2)")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def main():
    data = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    template = env.from_string(data["template"])
    out = []
    for chat in data["chats"]:
        tools = chat.get("tools") or None
        out.append(template.render(messages=chat["messages"], tools=tools, add_generation_prompt=True,
                                   bos_token="", eos_token=""))
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
