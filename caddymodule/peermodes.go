package caddymodule

import "github.com/llmroute/caddy-llmroute/policies"

// peerModes maps the peers option to the strategy's mode ("" is auto).
var peerModes = map[string]policies.PeerMode{
	"":     policies.PeersAuto,
	"auto": policies.PeersAuto,
	"none": policies.PeersNone,
	"some": policies.PeersSome,
}
