-- Signed engine callbacks (E7) from a file written by bench/callback_cost.py, one a line:
-- "webhook-id<TAB>webhook-timestamp<TAB>webhook-signature<TAB>body". Each is sent once (a second
-- time would be a replay): thread k of n sends lines k, k+n, ... and stops once its share is
-- sent (the answers still on their way on its other connections are not waited for, nor counted:
-- stopping on answers instead, one request lost to a reconnection kept a thread sending spares).
-- Loaded after common.lua (bench.wrk.combined_script), which counts and prints the answers by status.

function init(args)
  local me, count = thread_id, tonumber(args[2])
  requests, sent = {}, 0
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
