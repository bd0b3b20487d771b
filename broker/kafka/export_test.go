package kafka

import "github.com/msgx/msgx/broker/driver"

// OnWaitingForRoom makes sub call f each time its Receive starts waiting for
// prefetch room. Set it before the first Receive.
func OnWaitingForRoom(sub driver.Subscription, f func()) { sub.(*subscription).waitingForRoom = f }

// MemberInstanceID is sub's static group member id ("" for a dynamic member).
func MemberInstanceID(sub driver.Subscription) string { return sub.(*subscription).member }
