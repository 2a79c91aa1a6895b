-- wrk script of tests/bench/hooks-bench.sh: POSTs one signed GitHub-style
-- delivery over and over, each with its own X-GitHub-Delivery (the run's
-- prefix, the thread and a counter), so no request is a duplicate. The body
-- and its X-Hub-Signature-256 are the same for every request: GitHub signs
-- only the body, not the delivery id.
-- Arguments (after --): PREFIX BODYFILE SIGNATURE
-- At the end it prints one line: "RESULT key=value ..." (latencies in µs).

local threads = {}

function setup(thread)
	table.insert(threads, thread)
	thread:set("tid", #threads)
end

function init(args)
	prefix = args[1]
	local f = assert(io.open(args[2], "rb"))
	body = f:read("*a")
	f:close()
	signature = args[3]
	n = 0
	s2xx, s429, s503, sother = 0, 0, 0, 0
end

function request()
	n = n + 1
	return wrk.format("POST", nil, {
		["Content-Type"] = "application/json",
		["User-Agent"] = "GitHub-Hookshot/bench",
		["X-GitHub-Event"] = "push",
		["X-GitHub-Delivery"] = string.format("%s-%d-%d", prefix, tid, n),
		["X-Hub-Signature-256"] = signature,
	}, body)
end

-- Answers by status, per thread (summed in done): only 2xx are deliveries a
-- receiver took; 429 and 503 are refusals that store nothing.
function response(status, headers, body)
	if status >= 200 and status < 300 then s2xx = s2xx + 1
	elseif status == 429 then s429 = s429 + 1
	elseif status == 503 then s503 = s503 + 1
	else sother = sother + 1 end
end

function done(summary, latency, requests)
	local e = summary.errors
	local ok, q, u, o = 0, 0, 0, 0
	for _, t in ipairs(threads) do
		ok, q, u, o = ok + t:get("s2xx"), q + t:get("s429"), u + t:get("s503"), o + t:get("sother")
	end
	io.write(string.format("RESULT requests=%d duration_us=%d rate=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
		"err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d s2xx=%d s429=%d s503=%d sother=%d\n",
		summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
		latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
		e.connect, e.read, e.write, e.status, e.timeout, ok, q, u, o))
end
