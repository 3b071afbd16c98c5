#!/usr/bin/env bash
# The gateway, driven by curl. Usage:
#   curl_suite.sh BASE_URL             # protocol, errors, metrics (sim group, default limits)
#   curl_suite.sh BASE_URL overload    # a server with max_inflight 1, max_queue 0
#   curl_suite.sh BASE_URL auth KEY    # a server with API keys
# Prints one line per check; exits non-zero when one fails.
set -u
BASE=$1
MODE=${2:-protocol}
KEY=${3:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; jobs -p | xargs -r kill 2>/dev/null' EXIT
FAILED=0

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); }

# req NAME EXPECTED_STATUS METHOD PATH [curl args...]: body in $TMP/body, headers in $TMP/headers.
req() {
  local name=$1 want=$2 method=$3 path=$4
  shift 4
  local got
  got=$(curl -s -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' -X "$method" "$BASE$path" "$@")
  if [ "$got" = "$want" ]; then pass "$name"; else fail "$name" "status $got, want $want: $(head -c 300 "$TMP/body")"; fi
}
# has NAME FRAGMENT: the last body contains FRAGMENT.
has() {
  if grep -q -F -- "$2" "$TMP/body"; then pass "$1"; else fail "$1" "no '$2' in $(head -c 300 "$TMP/body")"; fi
}
JSON=(-H 'content-type: application/json')

# promlint FILE: `promtool check metrics` on an exposition; prints every
# problem except the colon in vLLM's own `vllm:*` names (kept for
# dashboards and KEDA triggers). Empty output means clean.
promlint() {
  command -v promtool >/dev/null || { echo "promtool is not installed (make promtool)"; return; }
  promtool check metrics < "$1" 2>&1 \
    | grep -v -E "^vllm:[a-zA-Z0-9_:]+ metric names should not contain ':'$" \
    | grep -v -E '^$' || true
}

case "$MODE" in
protocol)
  req health 200 GET /health
  req models 200 GET /v1/models
  has models_lists_members '"id":"reference"'
  req chat 200 POST /v1/chat/completions "${JSON[@]}" \
    -d '{"model":"tokenrouter","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"return_token_sources":true}'
  has chat_usage_by_model '"completion_tokens_by_model":{'
  has chat_token_sources '"token_sources":['
  req chat_stream 200 POST /v1/chat/completions "${JSON[@]}" -N \
    -d '{"model":"tokenrouter","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}'
  has stream_content_type_done 'data: [DONE]'
  has stream_usage_chunk '"choices":[],"usage":{'
  grep -qi '^content-type: text/event-stream' "$TMP/headers" && pass sse_content_type || fail sse_content_type "$(cat "$TMP/headers")"
  req completions_ids 200 POST /v1/completions "${JSON[@]}" -d '{"model":"tokenrouter","prompt":[1,2,3],"max_tokens":2}'
  req malformed_json 400 POST /v1/chat/completions "${JSON[@]}" -d '{"model":'
  has malformed_json_error_shape '"error":{"message":'
  printf '{"model":"tokenrouter","prompt":"\xff\xfe"}' > "$TMP/bad_utf8"
  req invalid_utf8 400 POST /v1/completions "${JSON[@]}" --data-binary "@$TMP/bad_utf8"
  has invalid_utf8_named 'UTF-8'
  req not_an_object 400 POST /v1/completions "${JSON[@]}" -d '[1,2,3]'
  head -c 2000000 /dev/zero | tr '\0' 'a' > "$TMP/huge"
  req huge_body 413 POST /v1/completions "${JSON[@]}" --data-binary "@$TMP/huge"
  req huge_chunked_body 413 POST /v1/completions "${JSON[@]}" -H 'transfer-encoding: chunked' --data-binary "@$TMP/huge"
  req small_chunked_body 200 POST /v1/completions "${JSON[@]}" -H 'transfer-encoding: chunked' \
    -d '{"model":"tokenrouter","prompt":"x","max_tokens":2}'
  req absurd_number 400 POST /v1/completions "${JSON[@]}" -d '{"model":"tokenrouter","prompt":"x","temperature":1e999}'
  req wrong_type 400 POST /v1/completions "${JSON[@]}" -d '{"model":"tokenrouter","prompt":"x","max_tokens":"many"}'
  has wrong_type_names_field 'max_tokens'
  req negative_n 400 POST /v1/completions "${JSON[@]}" -d '{"model":"tokenrouter","prompt":"x","n":-1}'
  req huge_max_tokens 400 POST /v1/completions "${JSON[@]}" -d '{"model":"tokenrouter","prompt":"x","max_tokens":18446744073709551615}'
  req unsupported_field 400 POST /v1/chat/completions "${JSON[@]}" \
    -d '{"model":"tokenrouter","messages":[{"role":"user","content":"hi"}],"presence_penalty":1.0,"logit_bias":{"1":2}}'
  has unsupported_named '"param":"logit_bias"'
  req unknown_model 404 POST /v1/completions "${JSON[@]}" -d '{"model":"gpt-4","prompt":"x"}'
  has unknown_model_code '"code":"model_not_found"'
  req wrong_method 405 GET /v1/completions
  req unknown_route 404 GET /v2/nothing
  req tokenize 200 POST /tokenize "${JSON[@]}" -d '{"prompt":"hello world"}'
  TOKENS=$(sed -n 's/.*"tokens":\(\[[0-9,]*\]\).*/\1/p' "$TMP/body")
  req detokenize 200 POST /detokenize "${JSON[@]}" -d "{\"tokens\":$TOKENS}"
  has round_trip '"prompt":"hello world"'
  req tokenize_chat 200 POST /tokenize "${JSON[@]}" -d '{"messages":[{"role":"user","content":"hi"}]}'
  req detokenize_out_of_vocab 400 POST /detokenize "${JSON[@]}" -d '{"tokens":[999999999]}'
  req metrics 200 GET /metrics
  for m in vllm:time_to_first_token_seconds vllm:inter_token_latency_seconds vllm:e2e_request_latency_seconds \
           vllm:num_requests_running vllm:num_requests_waiting vllm:request_success_total \
           tokenrouter_large_model_token_share tokenrouter_http_requests_total tokenrouter_step_latency_seconds; do
    has "metric_$m" "$m"
  done
  has metric_status_400 'status="400"'
  # Values, not only names: the requests above were counted.
  grep -qE '^vllm:request_success_total\{finished_reason="length",model_name="tokenrouter"\} [1-9]' "$TMP/body" \
    && pass metric_success_counted || fail metric_success_counted "$(grep request_success "$TMP/body")"
  grep -qE '^vllm:time_to_first_token_seconds_count\{model_name="tokenrouter"\} [1-9]' "$TMP/body" \
    && pass metric_ttft_observed || fail metric_ttft_observed "$(grep time_to_first_token_seconds_count "$TMP/body")"
  grep -qE '^tokenrouter_http_requests_total\{route="/v1/chat/completions",status="200"\} [1-9]' "$TMP/body" \
    && pass metric_http_200_counted || fail metric_http_200_counted "$(grep http_requests_total "$TMP/body")"
  grep -qE '^tokenrouter_large_model_token_share 0\.[0-9]*[1-9]' "$TMP/body" \
    && pass metric_large_share_set || fail metric_large_share_set "$(grep large_model_token_share "$TMP/body")"
  # Prometheus naming rules (promtool's lint); first prove the lint bites.
  printf '# HELP tokenrouter:x x\n# TYPE tokenrouter:x gauge\ntokenrouter:x 1\n' > "$TMP/bad"
  if [ -n "$(promlint "$TMP/bad" | grep -F "tokenrouter:x")" ]; then pass promlint_flags_colons; else fail promlint_flags_colons "$(promlint "$TMP/bad")"; fi
  LINT=$(promlint "$TMP/body")
  [ -z "$LINT" ] && pass metrics_pass_promtool || fail metrics_pass_promtool "$LINT"
  # A client that gives up cancels its request in every model (KV freed).
  # It streams, so that the check can see the request running (its first
  # event arrived, the gauges above 0) before the client leaves; otherwise a
  # request that never started would pass too.
  curl -s -N "$BASE/v1/completions" "${JSON[@]}" \
    -d '{"model":"tokenrouter","prompt":"x","max_tokens":50000,"stream":true}' > "$TMP/leaving" &
  LEAVING=$!
  for _ in $(seq 1 1200); do grep -q '^data: {' "$TMP/leaving" && break; sleep 0.05; done
  curl -s -o "$TMP/body" "$BASE/metrics"
  if grep -q '^data: {' "$TMP/leaving" \
     && grep -qE '^tokenrouter_active_concurrency\{model="quick"\} [1-9]' "$TMP/body" \
     && grep -qE '^tokenrouter_kv_cache_usage_perc\{model="quick"\} [0-9.e-]*[1-9]' "$TMP/body"; then
    pass disconnect_request_was_running
  else
    fail disconnect_request_was_running "first event: $(head -c 200 "$TMP/leaving"); $(grep -E 'active_concurrency|kv_cache_usage' "$TMP/body")"
  fi
  kill "$LEAVING"; wait "$LEAVING" 2>/dev/null
  gone=0
  for _ in $(seq 1 1200); do
    curl -s -o "$TMP/body" "$BASE/metrics"
    if grep -q '^tokenrouter_active_concurrency{model="quick"} 0' "$TMP/body" \
       && grep -q '^tokenrouter_kv_cache_usage_perc{model="reference"} 0$' "$TMP/body" \
       && grep -q '^tokenrouter_kv_cache_usage_perc{model="quick"} 0$' "$TMP/body"; then gone=1; break; fi
    sleep 0.05
  done
  [ $gone = 1 ] && pass disconnect_cancels_and_frees_kv || fail disconnect_cancels_and_frees_kv "$(grep -E 'active_concurrency|kv_cache_usage' "$TMP/body")"
  req still_healthy 200 GET /health
  ;;
overload)
  # One slot, no queue: a long request holds the slot, the next gets 429.
  curl -s -N "$BASE/v1/completions" "${JSON[@]}" \
    -d '{"model":"tokenrouter","prompt":"x","max_tokens":100000,"stream":true}' > "$TMP/long" &
  LONG=$!
  for _ in $(seq 1 1200); do [ -s "$TMP/long" ] && break; sleep 0.05; done
  req over_capacity 429 POST /v1/completions "${JSON[@]}" -d '{"model":"tokenrouter","prompt":"x","max_tokens":2}'
  grep -qi '^retry-after: [0-9]' "$TMP/headers" && pass retry_after || fail retry_after "$(cat "$TMP/headers")"
  has over_capacity_code '"code":"over_capacity"'
  # The client leaves: its request is cancelled and the slot frees up.
  kill "$LONG"; wait "$LONG" 2>/dev/null
  ok=0
  for _ in $(seq 1 1200); do
    code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$BASE/v1/completions" "${JSON[@]}" \
      -d '{"model":"tokenrouter","prompt":"x","max_tokens":2}')
    [ "$code" = 200 ] && { ok=1; break; }
    sleep 0.05
  done
  [ $ok = 1 ] && pass slot_freed_after_disconnect || fail slot_freed_after_disconnect "still $code"
  ;;
auth)
  req no_key 401 GET /v1/models
  has no_key_shape '"code":"invalid_api_key"'
  req wrong_key 401 POST /v1/completions "${JSON[@]}" -H "authorization: Bearer nope" -d '{"model":"tokenrouter","prompt":"x"}'
  req right_key 200 POST /v1/completions "${JSON[@]}" -H "authorization: Bearer $KEY" -d '{"model":"tokenrouter","prompt":"x","max_tokens":2}'
  req health_needs_no_key 200 GET /health
  req metrics_needs_no_key 200 GET /metrics
  if grep -q -F -- "$KEY" "$TMP/body"; then fail key_not_in_metrics "key leaked"; else pass key_not_in_metrics; fi
  ;;
*)
  echo "unknown mode $MODE"; exit 2 ;;
esac

echo "curl suite ($MODE): $FAILED failed"
[ "$FAILED" = 0 ]
