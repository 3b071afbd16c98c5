//! Devices and dtypes.
