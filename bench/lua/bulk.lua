-- POST /api/v1/scan/bulk with SIZE new e-mail targets each time, going round a list of API keys.
-- args: a tag that keeps the targets of one run apart from other runs', file of API keys, SIZE (default 100)
local keys, n, counter = {}, 0, 0

function init(args)
  tag = args[1]
  keys = json_post_headers(args[2])
  n = #keys
  size = tonumber(args[3] or "100")
end

function request()
  counter = counter + 1
  local items = {}
  for k = 1, size do
    items[k] = string.format('{"target": "bulk.%s.%d.%d.%d@example.com", "kind": "email"}', tag, thread_id,
                             counter, k)
  end
  local body = '{"targets": [' .. table.concat(items, ", ") .. ']}'
  return wrk.format("POST", "/api/v1/scan/bulk", keys[(counter + thread_id) % n + 1], body)
end
