//go:build nopulsar

package main

import "github.com/msgx/msgx/broker/brokers"

// optionalAdapters: none in a build with -tags nopulsar.
func optionalAdapters() []brokers.Adapter { return nil }
