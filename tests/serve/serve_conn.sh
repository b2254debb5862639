#!/usr/bin/env bash
# `loom serve`'s connections and start-up (conn.py has the socket-level checks):
#  - an unwritable --port-file is exit 2 naming the file, before and after the model loads;
#  - --idle-timeout/--header-timeout/--body-timeout: silent sockets, a header or a body that
#    stops halfway cannot hold the server; a half-closed client gets its whole answer;
#    clients that leave while queued are cancelled at once (conn.py);
#  - --model-name names the model in /v1/models and /v1/models/{id};
#  - one request-log line per request.
#   serve_conn.sh LOOM
source "$(dirname "$0")/lib.sh" "$1"

refused() {  # refused PORT_FILE WORDS: exit 2 and a message naming the file
  local status=0
  "$loom" serve --checkpoint ck --port 0 --port-file "$1" > out.txt 2>&1 || status=$?
  [ "$status" = 2 ] || fail "--port-file $1: exit $status, not 2: $(cat out.txt)"
  grep -qF -- "--port-file $1" out.txt && grep -qF -- "$2" out.txt ||
    fail "--port-file $1: the error does not name the file and '$2': $(cat out.txt)"
  echo "  --port-file $1 -> exit 2: $(tail -1 out.txt)"
}
echo "unwritable --port-file:"
refused "$dir/no/such/folder/port" "no folder"
refused "$dir" "is a directory"
if [ -w /dev/full ]; then refused /dev/full "No space left"; fi  # fails at the write itself

for t in idle header body; do  # a timeout must be a positive number of seconds
  status=0
  "$loom" serve --checkpoint ck --port 0 --$t-timeout 0 > out.txt 2>&1 || status=$?
  [ "$status" = 2 ] && grep -q -- "--$t-timeout must be > 0" out.txt ||
    fail "--$t-timeout 0: exit $status: $(cat out.txt)"
done

start conn --idle-timeout 1 --header-timeout 1 --body-timeout 1 --max-connections 4 \
  --max-batch 1 --max-queue 2 --max-len 65536 --model-name org/tiny
url=http://127.0.0.1:$(cat conn.port)
python3 "$here/conn.py" "$(cat conn.port)"

# --model-name: the id, and /v1/models/{id} (URL-escaped) or 404 for another
[ "$(curl -s "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')" = org/tiny ] ||
  fail "/v1/models does not list org/tiny"
[ "$(curl -s -o body.json -w '%{http_code}' "$url/v1/models/org%2Ftiny")" = 200 ] &&
  grep -q '"id":"org/tiny"' body.json || fail "/v1/models/org%2Ftiny: $(cat body.json)"
[ "$(curl -s -o body.json -w '%{http_code}' "$url/v1/models/ck")" = 404 ] &&
  grep -q "model 'ck' does not exist" body.json || fail "/v1/models/ck: $(cat body.json)"
echo "--model-name org/tiny: listed, /v1/models/org%2Ftiny 200, /v1/models/ck 404"

# the request log: client, request, status, tokens, time
grep -qE '127\.0\.0\.1:[0-9]+ "POST /v1/completions" 200 1 prompt \+ [0-9]+ generated tokens, [0-9.]+ ms' conn.log ||
  fail "no request-log line for POST /v1/completions: $(tail -5 conn.log)"
grep -qE '"GET /v1/models/ck" 404 ' conn.log || fail "no request-log line for the 404"
grep -qE '"- -" 408 ' conn.log || fail "no request-log line for the 408"
echo "request log: $(grep -m1 '"POST /v1/completions" 200' conn.log)"
echo "serve_conn: all checks passed"
