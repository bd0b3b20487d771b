package sis

// StateJSON exposes the state encoding to the tests.
func StateJSON(f *Flight) ([]byte, error) { return f.stateJSON() }
