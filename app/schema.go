package app

import (
	"maps"
	"slices"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// Schema returns the migration lines a service with cfg uses: the admin
// API's (which brings the inbox's and the outbox's, the service's own
// tables), the store's mailbox table when a mailbox of kind store is
// configured, and the lines registered with the processors of the configured
// streams and with the enabled pipelines. New applies them when
// store.migrate is on; `msgx migrate --config` applies them too.
func Schema(cfg *config.Config, reg *Registry) []store.Line {
	lines := []store.Line{admin.Schema()}
	for _, name := range slices.Sorted(maps.Keys(cfg.Mailboxes)) {
		if cfg.Mailboxes[name].Kind != config.MailboxMySQL {
			lines = append(lines, mailbox.Schema())
			break
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Streams)) {
		lines = append(lines, reg.processorSchema[cfg.Streams[name].Processor]...)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Pipelines)) {
		if p := cfg.Pipelines[name]; p.Enabled == nil || *p.Enabled {
			lines = append(lines, reg.pipelineSchema[name]...)
		}
	}
	return lines
}

// AllSchema returns every migration line the service and the processors and
// pipelines of reg can use, whatever a configuration chooses.
func AllSchema(reg *Registry) []store.Line {
	lines := []store.Line{admin.Schema(), mailbox.Schema()}
	for _, name := range slices.Sorted(maps.Keys(reg.processorSchema)) {
		lines = append(lines, reg.processorSchema[name]...)
	}
	for _, name := range slices.Sorted(maps.Keys(reg.pipelineSchema)) {
		lines = append(lines, reg.pipelineSchema[name]...)
	}
	for _, name := range slices.Sorted(maps.Keys(reg.querySchema)) {
		lines = append(lines, reg.querySchema[name]...)
	}
	return lines
}

// lineNames returns the names of lines and of the lines they require.
func lineNames(lines []store.Line) map[string]bool {
	out := map[string]bool{}
	var add func(ls []store.Line)
	add = func(ls []store.Line) {
		for _, l := range ls {
			if !out[l.Name] {
				out[l.Name] = true
				add(l.Requires)
			}
		}
	}
	add(lines)
	return out
}

// containsLines reports whether every line of lines is in names.
func containsLines(names map[string]bool, lines []store.Line) bool {
	for _, l := range lines {
		if !names[l.Name] {
			return false
		}
	}
	return true
}
