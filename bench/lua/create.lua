-- POST /api/v1/scan with a new e-mail target each time, going round a list of API keys.
-- args: a tag that keeps the targets of one run apart from other runs', file of API keys (one a line)
local keys, n, counter = {}, 0, 0

function init(args)
  tag = args[1]
  keys = json_post_headers(args[2])
  n = #keys
end

function request()
  counter = counter + 1
  local body = string.format('{"target": "bench.%s.%d.%d@example.com", "kind": "email"}', tag, thread_id,
                             counter)
  return wrk.format("POST", "/api/v1/scan", keys[(counter + thread_id) % n + 1], body)
end
