"""Reference side of test_json_matcher: validates documents with the `jsonschema` package and serialises
instances with Python's json module, all in one process.

usage: json_matcher_check.py IN.json OUT.json
IN:  {"schemas": [schema, ...],
      "docs": [{"schema": i, "text": "..."}, ...],     # validated: json.loads + jsonschema
      "values": [{"schema": i, "value": v}, ...]}      # serialised, then validated
OUT: {"docs": [{"valid": bool, "error": str}, ...],
      "values": [{"texts": [compact, default, indent2, indent2 non-ASCII], "valid": bool, "error": str}]}
"""
import json
import sys

import jsonschema


def openapi_nullable(schema):
    """`nullable: true` (OpenAPI) is not JSON Schema: rewrite it as the matcher reads it."""
    if isinstance(schema, list):
        return [openapi_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: openapi_nullable(v) for k, v in schema.items()}
    if out.pop("nullable", False):
        if "type" in out and not any(k in out for k in ("enum", "const")):
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = types + ["null"]
        elif "enum" in out:
            out["enum"] = out["enum"] + [None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def check(schema, text):
    try:
        instance = json.loads(text)
    except ValueError as e:
        return {"valid": False, "error": "json: %s" % e}
    try:
        jsonschema.Draft202012Validator(schema).validate(instance)
    except jsonschema.ValidationError as e:
        return {"valid": False, "error": "schema: %s" % e.message}
    return {"valid": True, "error": ""}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        req = json.load(f)
    schemas = [openapi_nullable(s) for s in req["schemas"]]
    for s in schemas:
        jsonschema.Draft202012Validator.check_schema(s)
    out = {"docs": [check(schemas[d["schema"]], d["text"]) for d in req["docs"]], "values": []}
    for v in req["values"]:
        texts = [json.dumps(v["value"], separators=(",", ":")), json.dumps(v["value"]),
                 json.dumps(v["value"], indent=2), json.dumps(v["value"], indent=2, ensure_ascii=False)]
        res = check(schemas[v["schema"]], texts[0])
        res["texts"] = texts
        out["values"].append(res)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
