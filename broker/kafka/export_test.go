package kafka

import "github.com/msgx/msgx/broker/driver"

// OnWaitingForRoom makes sub call f each time its Receive starts waiting for
// prefetch room. Set it before the first Receive.
func OnWaitingForRoom(sub driver.Subscription, f func()) { sub.(*subscription).waitingForRoom = f }
