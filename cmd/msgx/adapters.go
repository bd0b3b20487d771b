package main

import "github.com/msgx/msgx/app/config"

// compiledAdapters are the broker adapters this binary contains.
func compiledAdapters() []string {
	return []string{config.KindKafka, config.KindMem, config.KindMQTT, config.KindNATS, config.KindPulsar, config.KindRabbitMQ}
}
