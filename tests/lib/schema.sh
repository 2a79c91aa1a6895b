# shellcheck shell=bash
# schema.sh: take a state dir's database back to schema version 12, as a
# fleetd of that version left it, so a test can start this fleetd on an
# "older" state dir (tests/integration/upgrade.sh with a user agent,
# tests/vm/reconnect.sh with a running guest). A new migration that adds a
# table or column adds its undo here, and its version to SCHEMA_TAKEN_BACK.
# Needs sqlite3; fleetd must be stopped.

SCHEMA_TAKEN_BACK="13 14 15 16 17 18"	# the versions schema_take_back undoes

# schema_take_back DB: 0 when the database is at version 12 afterwards.
schema_take_back() {
	sqlite3 "$1" "DROP TABLE hosts; ALTER TABLE agents DROP COLUMN host;
	ALTER TABLE agents DROP COLUMN autostart; ALTER TABLE agents DROP COLUMN boot_priority;
	ALTER TABLE agents DROP COLUMN secret_files; ALTER TABLE agents DROP COLUMN egress_allow;
	ALTER TABLE agents DROP COLUMN memory_quota_mib; ALTER TABLE secrets DROP COLUMN size; PRAGMA user_version = 12;" &&
		[ "$(sqlite3 "$1" 'PRAGMA user_version')" = 12 ]
}
