"""huggingface_hub on the other side of test_hub_interop.cpp, to show both tools share one cache:
`read CACHE REPO FILE...` resolves files that tensorfold pulled, offline, and describes the cache as
huggingface_hub scans it; `download CACHE REPO` pulls with huggingface_hub from $HF_ENDPOINT (the test's
fake Hub on 127.0.0.1) for tensorfold to read. Prints JSON."""
import json
import os
import sys

# Loopback only: refuse any other endpoint, and read offline unless downloading from the fake Hub.
MODE = sys.argv[1]
if MODE == "download":
    if not os.environ.get("HF_ENDPOINT", "").startswith("http://127.0.0.1:"):
        sys.exit("hub_interop.py: HF_ENDPOINT must be the test's fake Hub on 127.0.0.1")
elif MODE == "read":
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
else:
    sys.exit("hub_interop.py: mode must be read or download")

from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download  # noqa: E402


def main():
    mode, cache, repo = MODE, sys.argv[2], sys.argv[3]
    if mode == "read":
        paths = {f: os.path.realpath(hf_hub_download(repo, f, cache_dir=cache, local_files_only=True))
                 for f in sys.argv[4:]}
        info = scan_cache_dir(cache)
        repos = [{"repo_id": r.repo_id, "size_on_disk": r.size_on_disk, "refs": sorted(r.refs),
                  "commits": sorted(rev.commit_hash for rev in r.revisions),
                  "files": sorted(f.file_name for rev in r.revisions for f in rev.files)}
                 for r in info.repos]
        warnings = [str(w) for w in info.warnings]
        print(json.dumps({"paths": paths, "repos": repos, "warnings": warnings}))
    else:
        path = snapshot_download(repo, cache_dir=cache, allow_patterns=["*.json", "*.safetensors"])
        print(json.dumps({"snapshot": path}))


if __name__ == "__main__":
    main()
