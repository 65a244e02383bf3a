"""airplay: aerial navigation policies in 3D Gaussian Splatting scenes, over ROS 2 and MAVLink.

The core (everything outside :mod:`airplay.nodes`) imports no rclpy; see DESIGN.md section 1.
"""

__version__ = "0.1.0"
