"""soak/judges"""
