"""Tests; a package so that tests/coordinator (and the like) never shadow the real packages of the same name."""
