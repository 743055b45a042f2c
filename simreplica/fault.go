package simreplica

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request headers that inject a fault into one request.
const (
	// HeaderFault carries a fault spec (see ParseFault); "none" disables
	// the global fault for this request.
	HeaderFault = "X-Sim-Fault"
	// HeaderRetryAfter sets the Retry-After seconds of a 429/503 fault.
	HeaderRetryAfter = "X-Sim-Retry-After"
	// HeaderStallMs sets the duration of a "stall" fault in milliseconds.
	HeaderStallMs = "X-Sim-Stall-Ms"
	// HeaderOutputTokens sets the natural answer length of one request.
	HeaderOutputTokens = "X-Sim-Output-Tokens"
	// HeaderReplica is set on every response to the replica's name.
	HeaderReplica = "X-Sim-Replica"
)

// Fault is a parsed fault spec: what to do wrong to a request. The zero
// value is no fault. Several can be combined ("restart,slow=5").
type Fault struct {
	// Status, if non-zero (429, 500 or 503), answers with that status and
	// an OpenAI-style error instead of serving.
	Status int
	// RetryAfter is the Retry-After header, in seconds, of a 429 or 503.
	RetryAfter int
	// Stall delays the first byte of the response (the request is not
	// submitted to the engine until then); client cancellation is honoured.
	Stall time.Duration
	// CutAfter, if non-negative, closes the connection abruptly after that
	// many content chunks: the client sees neither a terminating chunk nor
	// [DONE]. -1 means no cut.
	CutAfter int
	// Slow is a pause between content chunks.
	Slow time.Duration
	// Refuse closes the connection without any response; as a global fault
	// of a server started with Serve it closes the listener instead.
	Refuse bool
	// Restart wipes the prefix cache before serving the request.
	Restart bool
}

// NoFault is the zero fault (CutAfter -1).
var NoFault = Fault{CutAfter: -1}

// IsZero reports whether f injects nothing.
func (f Fault) IsZero() bool {
	return f.Status == 0 && f.Stall == 0 && f.CutAfter < 0 && f.Slow == 0 && !f.Refuse && !f.Restart
}

// String renders f back in the spec syntax ParseFault reads ("" for none).
func (f Fault) String() string {
	var parts []string
	if f.Refuse {
		parts = append(parts, "refuse")
	}
	if f.Restart {
		parts = append(parts, "restart")
	}
	if f.Status != 0 {
		parts = append(parts, strconv.Itoa(f.Status))
	}
	if f.Stall > 0 {
		parts = append(parts, "stall="+strconv.FormatInt(f.Stall.Milliseconds(), 10))
	}
	if f.CutAfter >= 0 {
		parts = append(parts, "cut-after="+strconv.Itoa(f.CutAfter))
	}
	if f.Slow > 0 {
		parts = append(parts, "slow="+strconv.FormatInt(f.Slow.Milliseconds(), 10))
	}
	return strings.Join(parts, ",")
}

// ParseFault reads a comma-separated fault spec:
//
//	429 | 503 | 500        answer with that status (429/503 with Retry-After)
//	stall[=MS]            sleep before the first byte (default defStall)
//	cut-after=N           close the connection after N content chunks
//	slow=MS               sleep MS between content chunks
//	refuse                close the connection without a response
//	restart               wipe the prefix cache before serving
//	none | ""             no fault
//
// retryAfter is the Retry-After seconds for 429/503.
func ParseFault(spec string, retryAfter int, defStall time.Duration) (Fault, error) {
	f := NoFault
	f.RetryAfter = retryAfter
	for _, raw := range strings.Split(spec, ",") {
		item := strings.ToLower(strings.TrimSpace(raw))
		name, val, hasVal := strings.Cut(item, "=")
		num := func() (int, error) {
			n, err := strconv.Atoi(strings.TrimSpace(val))
			if !hasVal || err != nil || n < 0 {
				return 0, fmt.Errorf("simreplica: fault %q needs a non-negative number", item)
			}
			return n, nil
		}
		switch name {
		case "", "none":
		case "429", "503", "500":
			f.Status, _ = strconv.Atoi(name)
		case "stall":
			f.Stall = defStall
			if hasVal {
				n, err := num()
				if err != nil {
					return NoFault, err
				}
				f.Stall = time.Duration(n) * time.Millisecond
			}
		case "cut-after":
			n, err := num()
			if err != nil {
				return NoFault, err
			}
			f.CutAfter = n
		case "slow":
			n, err := num()
			if err != nil {
				return NoFault, err
			}
			f.Slow = time.Duration(n) * time.Millisecond
		case "refuse":
			f.Refuse = true
		case "restart":
			f.Restart = true
		default:
			return NoFault, fmt.Errorf("simreplica: unknown fault %q", item)
		}
	}
	return f, nil
}

// requestFault returns the fault for r: its X-Sim-Fault header when
// present (with X-Sim-Retry-After and X-Sim-Stall-Ms), else the global
// fault. It returns an error for malformed headers.
func requestFault(r *http.Request, global Fault, defRetry int, defStall time.Duration) (Fault, error) {
	spec, present := r.Header[HeaderFault]
	if !present {
		return global, nil
	}
	retry := defRetry
	if v := r.Header.Get(HeaderRetryAfter); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return NoFault, fmt.Errorf("simreplica: bad %s %q", HeaderRetryAfter, v)
		}
		retry = n
	}
	stall := defStall
	if v := r.Header.Get(HeaderStallMs); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return NoFault, fmt.Errorf("simreplica: bad %s %q", HeaderStallMs, v)
		}
		stall = time.Duration(n) * time.Millisecond
	}
	return ParseFault(strings.Join(spec, ","), retry, stall)
}
