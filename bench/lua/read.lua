-- GET {prefix}{id}, going round a list of (API key, id) pairs: one customer or many.
-- args: path prefix (/api/v1/scan/ or /api/v1/scan/bulk/), file of "KEY ID" lines
local pairs_, n, i = {}, 0, 0

function init(args)
  prefix = args[1]
  for line in io.lines(args[2]) do
    local key, id = line:match("^(%S+)%s+(%S+)$")
    if key then
      n = n + 1
      pairs_[n] = {headers = {["Authorization"] = "Bearer " .. key}, path = prefix .. id}
    end
  end
  i = (thread_id or 0) * 7 % n  -- the threads start at different pairs
end

function request()
  i = i % n + 1
  return wrk.format("GET", pairs_[i].path, pairs_[i].headers)
end
