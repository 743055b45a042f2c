package sim

// Event kinds.
const (
	evArrival uint8 = iota + 1 // a session's first request arrives (a = session)
	evTurn                     // a later turn of session a (turn b) is sent
	evStepEnd                  // replica a's engine step ends
	evSample                   // router a scrapes the engines' metrics
	evRestart                  // replica a crash-restarts
)

// event is one scheduled happening (its time is the queue's: eventq keeps
// events at the same time in the order they were scheduled, which keeps
// runs deterministic).
type event struct {
	kind uint8
	a, b int
}
