-- Signed engine callbacks (E7) from a file written by bench/callback_cost.py, one a line:
-- "webhook-id<TAB>webhook-timestamp<TAB>webhook-signature<TAB>body". Each is sent once (a second
-- time would be a replay): thread k of n sends lines k, k+n, ... and stops once its share is
-- sent (the answers still on their way on its other connections are not waited for, nor counted:
-- stopping on answers instead, one request lost to a reconnection kept a thread sending spares).
-- Prints the answers by status.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

function init(args)
  local me, count = thread_id, tonumber(args[2])
  requests, statuses, sent = {}, {}, 0
  local i = 0
  for line in io.lines(args[1]) do
    if i % count == me - 1 then
      local id, ts, sig, body = line:match("^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
      requests[#requests + 1] = wrk.format("POST", "/engine/v1/callbacks", {
        ["Content-Type"] = "application/json", ["webhook-id"] = id, ["webhook-timestamp"] = ts,
        ["webhook-signature"] = sig}, body)
    end
    i = i + 1
  end
  -- Asked for one more once its share is sent, the thread stops; wrk wants a request all the same:
  -- an unsigned call (a cheap 401), at most one a thread.
  spare = wrk.format("POST", "/engine/v1/callbacks", {["Content-Type"] = "application/json"}, "{}")
end

function request()
  sent = sent + 1
  if sent > #requests then
    wrk.thread:stop()
    return spare
  end
  return requests[sent]
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for code, n in pairs(thread:get("statuses")) do total[code] = (total[code] or 0) + n end
  end
  local parts = {}
  for code, n in pairs(total) do table.insert(parts, string.format('"%d": %d', code, n)) end
  io.write("BENCH_STATUS {" .. table.concat(parts, ", ") .. "}\n")
  io.write(string.format("BENCH_LATENCY_US p50=%d p99=%d\n", latency:percentile(50), latency:percentile(99)))
end
