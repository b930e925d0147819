-- POST /v1/investigations straight at an engine (the stand-in's capacity), a new target each time.
-- args: a tag, the engine's bearer token
local counter = 0

function init(args)
  tag = args[1]
  headers = {["Authorization"] = "Bearer " .. args[2], ["Content-Type"] = "application/json"}
end

function request()
  counter = counter + 1
  local body = string.format('{"target": "engine.%s.%d.%d@example.com", "kind": "email", "reference": "r"}',
                             tag, thread_id, counter)
  return wrk.format("POST", "/v1/investigations", headers, body)
end
